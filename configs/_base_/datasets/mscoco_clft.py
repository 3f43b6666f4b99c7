# MSCOCO, Cross-lingual Finetune setting: Karpathy train (train + restval) English captions with
# their machine translations into ja and zh (MT(DTD), docs/data.md), evaluated as mscoco_eval.py
# says. Prepare with tools/data/prepare_mscoco.py
# (--stair-json ... --coco-cn-dir ... --translations ja=... zh=...).
_base_ = ['./train_loaders.py', './mscoco_eval.py']


def _train_captions(**options):
    """The Karpathy train + restval captions; ``options`` pick what a loader reads of them."""
    return dict(type='CaptionPairDataset', data_root=_base_.data_root,
                data_prefix=_base_.data_prefix, ann_file='annotations/coco_train.json',
                transform=_base_.media_transform, **options)


train_dataloader = dict(dataset=_train_captions(target_langs=_base_.target_langs))
text_train_dataloader = dict(
    _base_.train_dataloader, num_workers=2,
    dataset=_train_captions(target_langs=_base_.target_langs, with_media=False))
# The ~566.7k English captions at batch 128 give 4,427 iterations per epoch (drop_last),
# 22,135 in DASD's 5 epochs of the source finetune.
source_finetune_dataloader = dict(_base_.train_dataloader,
                                  dataset=_train_captions(source_only=True))
