# MSCOCO in the Cross-lingual Finetune setting, evaluated as in DASD's Table 1: Japanese on STAIR
# Captions and Chinese on COCO-CN, two datasets scored in one pass (MultiDatasetValLoop /
# MultiDatasetTestLoop), each under its own prefix. The loops add `mAR`, the mean AR of ja and zh,
# which CheckpointHook(save_best='mAR') selects on -- validation splits only; the test loop never
# touches the best checkpoint. Test: ja on MLA's 5-fold 1K protocol (folds=(0,) gives the DASD
# code's fold 0), zh on the COCO-CN test split.
# Use this file instead of ../datasets/mscoco_clft.py (it includes it).
_base_ = ['../datasets/mscoco_clft.py']

val_dataloader = [{{_base_.val_dataloader}}, {{_base_.zh_val_dataloader}}]
val_evaluator = [
    dict(type='RetrievalMetric', languages=['en', 'ja'], prefix='coco_ja'),
    dict(type='RetrievalMetric', languages=['zh'], prefix='cococn_zh'),
]
val_cfg = dict(type='MultiDatasetValLoop')

test_dataloader = [{{_base_.test_dataloader}}, {{_base_.zh_test_dataloader}}]
test_evaluator = [
    dict(type='RetrievalMetric', languages=['en', 'ja'], protocol='coco_1k_5fold',
         prefix='coco1k_ja'),
    dict(type='RetrievalMetric', languages=['zh'], prefix='cococn_zh'),
]
test_cfg = dict(type='MultiDatasetTestLoop')
