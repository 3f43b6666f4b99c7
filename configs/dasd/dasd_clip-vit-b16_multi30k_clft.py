# dasd_clip-vit-b32_multi30k_clft.py on English CLIP ViT-B/16
# (docs/methods/dasd.md, "ViT-B/16").
_base_ = ['./dasd_clip-vit-b32_multi30k_clft.py']

model = dict(backbone=dict(arch='ViT-B-16'))
