# CDDS on CLIP ViT-B/32 (OpenAI weights), Flickr30K English image-text retrieval (the paper's
# CLIP setting). Data as in cdds_vit-bert-b16_flickr30k.py (../_base_/evaluation/cdds_flickr30k.py)
# with CLIP's own preprocessing. CLIP is already aligned, so its towers fine-tune gently
# (0.1 x a 1e-4 rate) while the UNets learn at 1e-4 (cdds_clip-vit-b32_phases.py).
_base_ = [
    '../_base_/models/cdds_clip-vit-b32.py',
    '../_base_/evaluation/cdds_flickr30k.py',
    '../_base_/schedules/cdds_clip-vit-b32_phases.py',
    '../_base_/default_runtime.py',
]

default_hooks = dict(checkpoint=dict(interval=dict(_delete_=True, epochs=1)))
