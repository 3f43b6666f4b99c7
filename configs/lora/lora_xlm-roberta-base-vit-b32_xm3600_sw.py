# A Swahili LoRA for open_clip's XLM-R CLIP, evaluated on Crossmodal-3600 (docs/backbones.md,
# docs/evaluation.md). XLM-R B/32 reads Swahili already, but retrieves poorly in it (open_clip's
# published XM3600 text-to-image R@1 for sw: 2.3); the LoRA of
# ../_base_/models/lora_xlm-roberta-base-vit-b32.py learns it from machine-translated Multi30K
# captions (../_base_/datasets/crossmodal3600_sw_multi30k-mt.py): cross_lingual aligns the
# Swahili branch to the frozen English tower (L_CL), cross_modal to the images (L_CM).
_base_ = [
    '../_base_/models/lora_xlm-roberta-base-vit-b32.py',
    '../_base_/datasets/crossmodal3600_sw_multi30k-mt.py',
    '../_base_/schedules/alignment_phases.py',
    '../_base_/default_runtime.py',
]

media = dict(dataset=dict(transform=dict(backbone={{_base_.xlmr_clip_arch}},
                                         pretrained='laion5b_s13b_b90k')))
train_dataloader = media
text_train_dataloader = media
test_dataloader = media
train_cfg = dict(val_interval=0, validate_at_phase_end=False)
default_hooks = dict(checkpoint=dict(save_best=None))
