# DASD on English CLIP ViT-B/32, MSCOCO, Zero-shot setting (DASD Table 1, ja and zh): the target
# languages are learnt from CC300K and never from COCO; CLIP is not fine-tuned. Evaluation as in
# dasd_clip-vit-b32_mscoco_clft.py.
_base_ = [
    '../_base_/models/clip-vit-b32_dasd.py',
    '../_base_/datasets/mscoco_zeroshot.py',
    '../_base_/schedules/dasd_phases.py',
    '../_base_/default_runtime.py',
]

model = dict(language_branch=dict(languages={{_base_.target_langs}}))

dasd_trainable = ['language_branch', 'disentangler']
train_cfg = dict(
    _delete_=True,
    type='PhasedTrainLoop',
    val_interval=5000,
    phases=[
        dict(name='cross_lingual', iters=45000, lr=2e-4, warmup_ratio=0.1, schedule='cosine',
             trainable=dasd_trainable, loss_weights=dict(cl=1.0, adv=1.0, sc=0.1),
             dataloader={{_base_.text_train_dataloader}}),
        dict(name='cross_modal', iters=6000, lr=6e-6, warmup_ratio=0.1, schedule='cosine',
             trainable=dasd_trainable, loss_weights=dict(cm=1.0, adv=1.0, sc=0.1)),
    ])

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
