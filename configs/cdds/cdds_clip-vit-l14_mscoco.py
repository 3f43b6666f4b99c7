# CDDS on CLIP ViT-L/14 (OpenAI weights), MSCOCO: cdds_clip-vit-b32_mscoco.py with the tower of
# ../_base_/models/cdds_clip-vit-b32.py's clip_vit_l14.
_base_ = ['./cdds_clip-vit-b32_mscoco.py']

model = dict(backbone=_base_.clip_vit_l14)
train_dataloader = val_dataloader = test_dataloader = _base_.clip_vit_l14_images
