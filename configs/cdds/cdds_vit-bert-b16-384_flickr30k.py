# CDDS on ViT-B/16 at 384 px + BERT, Flickr30K: cdds_vit-bert-b16_flickr30k.py with the paper's
# ViT-384 setting: 24 x 24 patches + CLS (577 image tokens); timm's Google ViT-B/16-384 weights
# (in21k, fine-tuned on in1k at 384).
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(backbone=dict(vision='vit_base_patch16_384.orig_in21k_ft_in1k'))
vit384_images = dict(dataset=dict(
    transform=dict(_base_.vit_media_transform, _delete_=True, size=384)))
train_dataloader = val_dataloader = test_dataloader = vit384_images
