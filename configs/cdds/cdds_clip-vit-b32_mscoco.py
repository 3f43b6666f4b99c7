# CDDS on CLIP ViT-B/32 (OpenAI weights), MSCOCO English image-text retrieval: Karpathy train +
# restval, selection on the 5K val split, test on 5-fold 1K and 5K
# (../_base_/datasets/mscoco_en.py). Recipe of cdds_clip-vit-b32_flickr30k.py; a checkpoint every
# quarter epoch.
_base_ = [
    '../_base_/models/cdds_clip-vit-b32.py',
    '../_base_/evaluation/cdds_mscoco.py',
    '../_base_/schedules/cdds_clip-vit-b32_phases.py',
    '../_base_/default_runtime.py',
]

default_hooks = dict(checkpoint=dict(interval=dict(_delete_=True, epochs=0.25)))
