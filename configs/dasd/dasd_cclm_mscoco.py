# DASD on the dual-stream CCLM, MSCOCO (DASD Table 3, "CCLM + DASD"): ja and zh learnt from the
# machine translations of the English Karpathy train captions, CCLM frozen; phases, weights and
# schedule as in cclm_multi30k.py. ja (STAIR) is evaluated on COCO, zh on COCO-CN; the model is
# selected on their mean AR (validation), the test reports ja on the 1K protocol (mean of five
# folds) and zh on the COCO-CN test split.
_base_ = [
    '../_base_/models/dasd_cclm.py',
    '../_base_/datasets/mscoco_clft.py',
    '../_base_/schedules/dasd_dynamic_phases.py',
    '../_base_/default_runtime.py',
]

model = dict(language_branch=dict(languages={{_base_.target_langs}}))

# CCLM's image preprocessing in every loader, in place of CLIP's.

train_dataloader = dict(dataset=dict(transform=dict(_delete_=True,
                                                    **_base_.cclm_media_transform)))
text_train_dataloader = dict(dataset=dict(transform=dict(_delete_=True,
                                                         **_base_.cclm_media_transform)))
val_dataloader = [
    dict(_base_.val_dataloader,
         dataset=dict(_base_.val_dataloader.dataset, transform=_base_.cclm_media_transform)),
    dict(_base_.zh_val_dataloader,
         dataset=dict(_base_.zh_val_dataloader.dataset, transform=_base_.cclm_media_transform)),
]
val_evaluator = [dict(type='RetrievalMetric', languages=['en', 'ja'], prefix='coco'),
                 dict(type='RetrievalMetric', languages=['zh'], prefix='cococn')]
val_cfg = dict(_delete_=True, type='MultiDatasetValLoop')
test_dataloader = [
    dict(_base_.test_dataloader,
         dataset=dict(_base_.test_dataloader.dataset, transform=_base_.cclm_media_transform)),
    dict(_base_.zh_test_dataloader,
         dataset=dict(_base_.zh_test_dataloader.dataset, transform=_base_.cclm_media_transform)),
]
test_evaluator = [dict(type='RetrievalMetric', languages=['en', 'ja'], protocol='coco_1k_5fold',
                       prefix='coco1k'),
                  dict(type='RetrievalMetric', languages=['zh'], prefix='cococn')]
test_cfg = dict(_delete_=True, type='MultiDatasetTestLoop')
