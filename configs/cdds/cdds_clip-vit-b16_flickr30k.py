# CDDS on CLIP ViT-B/16 (OpenAI weights), Flickr30K: cdds_clip-vit-b32_flickr30k.py with the paper's
# 14 x 14 patches at 224 px (197 image tokens, width 512) and
# CLIP's own preprocessing for it.
_base_ = ['./cdds_clip-vit-b32_flickr30k.py']

model = dict(backbone=dict(arch='ViT-B-16'))
_image_transform = dict(type='MediaTransform', backbone='ViT-B-16',
                        pretrained='openai')
train_dataloader = dict(dataset=dict(transform=_image_transform))
val_dataloader = dict(dataset=dict(transform=_image_transform))
test_dataloader = dict(dataset=dict(transform=_image_transform))
