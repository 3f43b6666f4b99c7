# Multi30K, Cross-lingual Finetune setting: the English Multi30K training captions with their
# machine translations into de/fr/cs (MT(DTD), docs/data.md), evaluated as multi30k_eval.py says.
# Prepare with tools/data/prepare_multi30k.py (--translations de=... fr=... cs=...).
_base_ = ['./train_loaders.py', './multi30k_eval.py']


def _train_captions(**options):
    """The Multi30K training captions; ``options`` pick what a loader reads of them."""
    return dict(type='CaptionPairDataset', data_root=_base_.data_root,
                data_prefix=_base_.data_prefix, ann_file='annotations/multi30k_train.json',
                transform=_base_.media_transform, **options)


train_dataloader = dict(dataset=_train_captions(target_langs=_base_.target_langs))
# Text-only pairs for phases that never look at the image (cross-lingual alignment).
text_train_dataloader = dict(
    _base_.train_dataloader, num_workers=2,
    dataset=_train_captions(target_langs=_base_.target_langs, with_media=False))
# English captions alone, for the optional source finetune of CLIP (CL-FT stage 0): the 29,000
# captions at batch 128 give 226 iterations per epoch (drop_last), 1,130 in DASD's 5 epochs.
source_finetune_dataloader = dict(_base_.train_dataloader,
                                  dataset=_train_captions(source_only=True))
