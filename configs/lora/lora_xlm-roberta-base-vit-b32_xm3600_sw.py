# A Swahili LoRA for open_clip's XLM-R CLIP, evaluated on Crossmodal-3600 (docs/backbones.md,
# docs/evaluation.md). XLM-R B/32 reads Swahili already, but retrieves poorly in it (open_clip's
# published XM3600 text-to-image R@1 for sw: 2.3); the LoRA of
# ../_base_/models/lora_xlm-roberta-base-vit-b32.py learns it from the English Multi30K training
# captions machine-translated into Swahili (tools/data/attach_translations.py writes
# annotations/multi30k_train_sw.json beside the Multi30K files): cross_lingual aligns the
# Swahili branch to the frozen English tower (L_CL), cross_modal to the images (L_CM). Test:
# XM3600 en + sw with both protocols (every caption, and CLIP_benchmark's first caption, which
# `tools/test.py --format clip_benchmark` exports). XM3600 has no validation split, so the run
# validates nothing and keeps its last checkpoint.
_base_ = [
    '../_base_/models/lora_xlm-roberta-base-vit-b32.py',
    '../_base_/datasets/crossmodal3600.py',
    '../_base_/datasets/train_loaders.py',
    '../_base_/schedules/alignment_phases.py',
    '../_base_/default_runtime.py',
]

train_captions = dict(type='CaptionPairDataset', data_root='data/multi30k',
                      data_prefix=dict(media='flickr30k-images'),
                      ann_file='annotations/multi30k_train_sw.json', target_langs=['sw'],
                      transform=dict(type='MediaTransform', backbone={{_base_.xlmr_clip_arch}},
                                     pretrained='laion5b_s13b_b90k'))
train_dataloader = dict(dataset=train_captions)
text_train_dataloader = dict(dataset=train_captions)
source_finetune_dataloader = None
media_transform = dict(backbone={{_base_.xlmr_clip_arch}}, pretrained='laion5b_s13b_b90k')
test_dataloader = dict(dataset=dict(languages=['en', 'sw'], transform=media_transform))

train_cfg = dict(val_interval=0, validate_at_phase_end=False)
val_dataloader = None
val_cfg = None
default_hooks = dict(checkpoint=dict(save_best=None))
