# CCLM zero-shot on MSCOCO (DASD Table 3, the "CCLM" row): ja on the 1K protocol (mean of five
# folds) and zh on COCO-CN test, with the frozen dual-stream CCLM reading every language itself
# (see cclm_multi30k_zeroshot.py); nothing is trained.
_base_ = [
    '../_base_/models/dasd_cclm.py',
    '../_base_/datasets/mscoco_clft.py',
    '../_base_/default_runtime.py',
]

model = dict(
    language_branch=dict(languages={{_base_.target_langs}}, adapters=None),
    disentangler=None)


train_dataloader = None
text_train_dataloader = None
source_finetune_dataloader = None
val_dataloader = None
val_cfg = None
zh_val_dataloader = None
# CCLM's image preprocessing in place of CLIP's.
test_dataloader = [
    dict(_base_.test_dataloader,
         dataset=dict(_base_.test_dataloader.dataset, transform=_base_.cclm_media_transform)),
    dict(_base_.zh_test_dataloader,
         dataset=dict(_base_.zh_test_dataloader.dataset, transform=_base_.cclm_media_transform)),
]
test_evaluator = [dict(type='RetrievalMetric', languages=['en', 'ja'], protocol='coco_1k_5fold',
                       prefix='coco1k'),
                  dict(type='RetrievalMetric', languages=['zh'], prefix='cococn')]
test_cfg = dict(type='MultiDatasetTestLoop')
