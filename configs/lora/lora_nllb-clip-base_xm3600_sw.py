# A Swahili LoRA for open_clip's NLLB-CLIP base, evaluated on Crossmodal-3600 (docs/backbones.md,
# docs/evaluation.md): the twin of lora_xlm-roberta-base-vit-b32_xm3600_sw.py on the NLLB text
# tower. NLLB-CLIP reads Swahili already (its captions begin with swh_Latn, written per caption
# by NLLBTokenizer); the LoRA of ../_base_/models/lora_nllb-clip-base.py adapts it on
# machine-translated Multi30K captions (../_base_/datasets/crossmodal3600_sw_multi30k-mt.py).
_base_ = [
    '../_base_/models/lora_nllb-clip-base.py',
    '../_base_/datasets/crossmodal3600_sw_multi30k-mt.py',
    '../_base_/schedules/alignment_phases.py',
    '../_base_/default_runtime.py',
]

media = dict(dataset=dict(transform=dict(backbone={{_base_.nllb_clip_arch}}, pretrained='v1')))
train_dataloader = media
text_train_dataloader = media
test_dataloader = media
train_cfg = dict(val_interval=0, validate_at_phase_end=False)
default_hooks = dict(checkpoint=dict(save_best=None))
