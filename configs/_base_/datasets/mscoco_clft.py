# MSCOCO, Cross-lingual Finetune setting: Karpathy train (train + restval) English captions with
# their machine translations into ja and zh (MT(DTD), docs/data.md). Japanese is evaluated on
# STAIR Captions of the Karpathy splits (5K test, and the 1K protocol's five folds), Chinese on
# COCO-CN's own val/test splits. Prepare with tools/data/prepare_mscoco.py
# (--stair-json ... --coco-cn-dir ... --translations ja=... zh=...).
_base_ = ['./loaders.py']
data_root = 'data/mscoco'
data_prefix = dict(media='images')
target_langs = ['ja', 'zh']
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')


def _train_captions(**options):
    """The Karpathy train + restval captions; ``options`` pick what a loader reads of them."""
    return dict(type='CaptionPairDataset', data_root=data_root, data_prefix=data_prefix,
                ann_file='annotations/coco_train.json', transform=media_transform, **options)


def _retrieval_loader(ann_file, languages):
    return dict(_base_.val_dataloader,
                dataset=dict(type='RetrievalDataset', data_root=data_root,
                             data_prefix=data_prefix, ann_file=ann_file, languages=languages,
                             transform=media_transform))


train_dataloader = dict(dataset=_train_captions(target_langs=target_langs))
text_train_dataloader = dict(
    _base_.train_dataloader, num_workers=2,
    dataset=_train_captions(target_langs=target_langs, with_media=False))
# The ~566.7k English captions at batch 128 give 4,427 iterations per epoch (drop_last),
# 22,135 in DASD's 5 epochs of the source finetune.
source_finetune_dataloader = dict(_base_.train_dataloader,
                                  dataset=_train_captions(source_only=True))
# ja (and en) on the Karpathy val split; zh on COCO-CN val.
val_dataloader = _retrieval_loader('annotations/coco_val.json', ['en', 'ja'])
zh_val_dataloader = _retrieval_loader('annotations/cococn_val.json', ['zh'])
# ja (and en) on the 5K test and on each 1K fold (report the mean over folds); zh on COCO-CN test.
test_dataloader = _retrieval_loader('annotations/coco_test5k.json', ['en', 'ja'])
test1k_fold_dataloaders = [_retrieval_loader(f'annotations/coco_test1k_fold{fold}.json',
                                             ['en', 'ja']) for fold in range(5)]
zh_test_dataloader = _retrieval_loader('annotations/cococn_test.json', ['zh'])
