# dasd_clip-vit-b32_multi30k_zeroshot.py on English CLIP ViT-B/16
# (docs/methods/dasd.md, "ViT-B/16").
_base_ = ['./dasd_clip-vit-b32_multi30k_zeroshot.py']

model = dict(backbone=dict(arch='ViT-B-16'))
