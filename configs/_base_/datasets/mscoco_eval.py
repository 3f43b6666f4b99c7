# MSCOCO's multilingual evaluation (DASD Table 1, ja and zh), shared by its Cross-lingual Finetune
# and Zero-shot settings: Japanese on STAIR Captions of the Karpathy splits, Chinese on COCO-CN's
# own val/test splits, two galleries scored in one pass (MultiDatasetValLoop /
# MultiDatasetTestLoop), each under its own prefix. The loops add `mAR`, the mean AR of ja and zh,
# which CheckpointHook(save_best='mAR') selects on -- validation splits only. Test: ja on MLA's
# 5-fold 1K protocol (folds=(0,) gives the DASD code's fold 0), zh on the COCO-CN test split.
# Prepare with tools/data/prepare_mscoco.py.
_base_ = ['./eval_loaders.py']
data_root = 'data/mscoco'
data_prefix = dict(media='images')
target_langs = ['ja', 'zh']
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')


def _retrieval_loader(ann_file, languages):
    return dict(_base_.val_dataloader,
                dataset=dict(type='RetrievalDataset', data_root=data_root,
                             data_prefix=data_prefix, ann_file=ann_file, languages=languages,
                             transform=media_transform))


# ja (and en) on the Karpathy val split; zh on COCO-CN val.
coco_val_dataloader = _retrieval_loader('annotations/coco_val.json', ['en', 'ja'])
zh_val_dataloader = _retrieval_loader('annotations/cococn_val.json', ['zh'])
# ja (and en) on the 5K test (scored by the 1K protocol's five folds, or as one 5K gallery) and
# on each 1K fold file; zh on COCO-CN test.
coco_test_dataloader = _retrieval_loader('annotations/coco_test5k.json', ['en', 'ja'])
test1k_fold_dataloaders = [_retrieval_loader(f'annotations/coco_test1k_fold{fold}.json',
                                             ['en', 'ja']) for fold in range(5)]
zh_test_dataloader = _retrieval_loader('annotations/cococn_test.json', ['zh'])

val_dataloader = [coco_val_dataloader, zh_val_dataloader]
val_evaluator = [dict(type='RetrievalMetric', prefix='coco'),
                 dict(type='RetrievalMetric', prefix='cococn')]
val_cfg = dict(type='MultiDatasetValLoop')
test_dataloader = [coco_test_dataloader, zh_test_dataloader]
test_evaluator = [dict(type='RetrievalMetric', protocol='coco_1k_5fold', prefix='coco1k'),
                  dict(type='RetrievalMetric', prefix='cococn')]
test_cfg = dict(type='MultiDatasetTestLoop')
