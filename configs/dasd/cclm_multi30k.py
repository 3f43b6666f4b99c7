# DASD on the dual-stream CCLM, Multi30K (DASD Table 3, "CCLM + DASD"):
#   python tools/train.py configs/dasd/cclm_multi30k.py
# CCLM stays frozen (no English fine-tuning stage: it is already multilingual and retrieval-ready);
# dynamic adapters and the disentangler learn de/fr/cs from the MT(DTD) pairs of Multi30K:
#   1. cross_lingual: L_CL + lambda1 L_adv + lambda2 L_sc on text pairs (45k steps, lr 2e-4);
#   2. cross_modal: L_CM + lambda1 L_adv + lambda2 L_sc on image-caption pairs (6k steps, lr 6e-6);
# lambda1 = 1, lambda2 = 0.1, DASD's CLIP schedule. Set the checkpoint in
# configs/_base_/models/dasd_cclm.py or with --cfg-options model.backbone.checkpoint=PATH.
_base_ = [
    '../_base_/models/dasd_cclm.py',
    '../_base_/datasets/multi30k_clft.py',
    '../_base_/schedules/dasd_dynamic_phases.py',
    '../_base_/default_runtime.py',
]

model = dict(language_branch=dict(languages={{_base_.target_langs}}))

# CCLM's image preprocessing in every loader, in place of CLIP's.
train_dataloader = dict(dataset=dict(transform=dict(_delete_=True,
                                                    **_base_.cclm_media_transform)))
text_train_dataloader = dict(dataset=dict(transform=dict(_delete_=True,
                                                         **_base_.cclm_media_transform)))
val_dataloader = dict(dataset=dict(transform=dict(_delete_=True, **_base_.cclm_media_transform)))
test_dataloader = dict(dataset=dict(transform=dict(_delete_=True, **_base_.cclm_media_transform)))
