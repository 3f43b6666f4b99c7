# CDDS on CLIP ViT-B/16 (OpenAI weights), Flickr30K: cdds_clip-vit-b32_flickr30k.py with the tower
# of ../_base_/models/cdds_clip-vit-b32.py's clip_vit_b16.
_base_ = ['./cdds_clip-vit-b32_flickr30k.py']

model = dict(backbone=_base_.clip_vit_b16)
train_dataloader = val_dataloader = test_dataloader = _base_.clip_vit_b16_images
