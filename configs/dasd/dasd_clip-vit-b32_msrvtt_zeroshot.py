# DASD on English CLIP ViT-B/32, Multi-MSRVTT video, Zero-shot setting (DASD Table 2): the eight
# target languages are learnt from CC300K images (UC2's translations, plus machine translations
# into ru, vi, sw and es attached to it; ../_base_/datasets/msrvtt_zeroshot.py) and never from
# MSRVTT; CLIP is not fine-tuned. Evaluation as in dasd_clip-vit-b32_msrvtt_clft.py.
_base_ = [
    '../_base_/models/dasd_clip-vit-b32.py',
    '../_base_/datasets/msrvtt_zeroshot.py',
    '../_base_/schedules/dasd_dynamic_phases.py',
    '../_base_/default_runtime.py',
]

model = dict(language_branch=dict(languages={{_base_.target_langs}}))
default_hooks = dict(checkpoint=dict(save_best='t2v_R@1_sum'))
