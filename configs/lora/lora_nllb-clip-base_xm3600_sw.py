# A Swahili LoRA for open_clip's NLLB-CLIP base, evaluated on Crossmodal-3600 (docs/backbones.md,
# docs/evaluation.md): the twin of lora_xlm-roberta-base-vit-b32_xm3600_sw.py on the NLLB text
# tower. NLLB-CLIP reads Swahili already (its captions begin with swh_Latn, written per caption
# by NLLBTokenizer); the LoRA of ../_base_/models/lora_nllb-clip-base.py adapts it on the
# English Multi30K training captions machine-translated into Swahili
# (tools/data/attach_translations.py writes annotations/multi30k_train_sw.json beside the
# Multi30K files): cross_lingual aligns the Swahili branch to the frozen English tower (L_CL),
# cross_modal to the images (L_CM). Test: XM3600 en + sw with both protocols (every caption, and
# CLIP_benchmark's first caption, which `tools/test.py --format clip_benchmark` exports). XM3600
# has no validation split, so the run validates nothing and keeps its last checkpoint.
_base_ = [
    '../_base_/models/lora_nllb-clip-base.py',
    '../_base_/datasets/crossmodal3600.py',
    '../_base_/schedules/alignment_phases.py',
    '../_base_/default_runtime.py',
]

train_captions = dict(type='CaptionPairDataset', data_root='data/multi30k',
                      data_prefix=dict(media='flickr30k-images'),
                      ann_file='annotations/multi30k_train_sw.json', target_langs=['sw'],
                      transform=dict(type='MediaTransform', backbone={{_base_.nllb_clip_arch}},
                                     pretrained='v1'))
train_dataloader = dict(dataset=train_captions)
media_transform = dict(backbone={{_base_.nllb_clip_arch}}, pretrained='v1')
test_dataloader = dict(dataset=dict(languages=['en', 'sw'], transform=media_transform))

train_cfg = dict(val_interval=0, validate_at_phase_end=False)
val_dataloader = None
val_cfg = None
default_hooks = dict(checkpoint=dict(save_best=None))
