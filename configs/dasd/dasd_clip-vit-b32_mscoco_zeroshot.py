# DASD on English CLIP ViT-B/32, MSCOCO, Zero-shot setting (DASD Table 1, ja and zh): the target
# languages are learnt from CC300K and never from COCO; CLIP is not fine-tuned. Evaluation as in
# dasd_clip-vit-b32_mscoco_clft.py.
_base_ = [
    '../_base_/models/dasd_clip-vit-b32.py',
    '../_base_/datasets/mscoco_zeroshot.py',
    '../_base_/schedules/dasd_dynamic_phases.py',
    '../_base_/default_runtime.py',
]

model = dict(language_branch=dict(languages={{_base_.target_langs}}))

# ja (STAIR) on COCO and zh on COCO-CN, one gallery each; the model is selected on the mean AR of
# ja and zh (MultiDatasetValLoop's mAR). Test: ja on the 1K protocol (mean of the five folds,
# MLA's convention; folds=(0,) is the DASD code's single fold), zh on the COCO-CN test split.
val_dataloader = [{{_base_.val_dataloader}}, {{_base_.zh_val_dataloader}}]
val_evaluator = [dict(type='RetrievalMetric', languages=['en', 'ja'], prefix='coco'),
                 dict(type='RetrievalMetric', languages=['zh'], prefix='cococn')]
val_cfg = dict(_delete_=True, type='MultiDatasetValLoop')
test_dataloader = [{{_base_.test_dataloader}}, {{_base_.zh_test_dataloader}}]
test_evaluator = [dict(type='RetrievalMetric', languages=['en', 'ja'], protocol='coco_1k_5fold',
                       prefix='coco1k'),
                  dict(type='RetrievalMetric', languages=['zh'], prefix='cococn')]
test_cfg = dict(_delete_=True, type='MultiDatasetTestLoop')
