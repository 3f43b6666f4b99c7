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


def _with_cclm_media(loader):
    """The loader with CCLM's image preprocessing instead of CLIP's."""
    return dict(loader, dataset=dict(loader['dataset'], transform=_base_.cclm_media_transform))


train_dataloader = dict(_delete_=True, **_with_cclm_media(_base_.train_dataloader))
text_train_dataloader = dict(_delete_=True, **_with_cclm_media(_base_.text_train_dataloader))
val_dataloader = [_with_cclm_media(_base_.val_dataloader),
                  _with_cclm_media(_base_.zh_val_dataloader)]
val_evaluator = [dict(type='RetrievalMetric', languages=['en', 'ja'], prefix='coco'),
                 dict(type='RetrievalMetric', languages=['zh'], prefix='cococn')]
val_cfg = dict(_delete_=True, type='MultiDatasetValLoop')
test_dataloader = [_with_cclm_media(_base_.test_dataloader),
                   _with_cclm_media(_base_.zh_test_dataloader)]
test_evaluator = [dict(type='RetrievalMetric', languages=['en', 'ja'], protocol='coco_1k_5fold',
                       prefix='coco1k'),
                  dict(type='RetrievalMetric', languages=['zh'], prefix='cococn')]
test_cfg = dict(_delete_=True, type='MultiDatasetTestLoop')
