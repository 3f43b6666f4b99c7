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


def _with_cclm_media(loader):
    """The loader with CCLM's image preprocessing instead of CLIP's."""
    return dict(loader, dataset=dict(loader['dataset'], transform=_base_.cclm_media_transform))


train_dataloader = dict(_delete_=True, **_with_cclm_media(_base_.train_dataloader))
text_train_dataloader = dict(_delete_=True, **_with_cclm_media(_base_.text_train_dataloader))
val_dataloader = dict(_delete_=True, **_with_cclm_media(_base_.val_dataloader))
test_dataloader = dict(_delete_=True, **_with_cclm_media(_base_.test_dataloader))

val_evaluator = dict(type='RetrievalMetric', languages={{_base_.eval_langs}},
                     source_language='en')
test_evaluator = val_evaluator
