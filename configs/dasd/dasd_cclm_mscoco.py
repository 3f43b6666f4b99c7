# DASD on the dual-stream CCLM, MSCOCO (DASD Table 3, "CCLM + DASD"): ja and zh learnt from the
# machine translations of the English Karpathy train captions, CCLM frozen; phases, weights and
# schedule as in cclm_multi30k.py. Evaluated as ../_base_/datasets/mscoco_eval.py says (ja on
# STAIR, zh on COCO-CN, selected on their mean AR).
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
    dict(_base_.coco_val_dataloader, dataset=dict(_base_.coco_val_dataloader.dataset,
                                                  transform=_base_.cclm_media_transform)),
    dict(_base_.zh_val_dataloader, dataset=dict(_base_.zh_val_dataloader.dataset,
                                                transform=_base_.cclm_media_transform)),
]
test_dataloader = [
    dict(_base_.coco_test_dataloader, dataset=dict(_base_.coco_test_dataloader.dataset,
                                                   transform=_base_.cclm_media_transform)),
    dict(_base_.zh_test_dataloader, dataset=dict(_base_.zh_test_dataloader.dataset,
                                                 transform=_base_.cclm_media_transform)),
]
