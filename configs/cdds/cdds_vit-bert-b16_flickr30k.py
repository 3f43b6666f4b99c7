# CDDS on ViT-B/16 + BERT, Flickr30K English image-text retrieval (the paper's main setting; data:
# ../_base_/datasets/flickr30k_en.py). Schedule (../_base_/schedules/cdds_vit-bert-b16_phases.py):
# 25 epochs (56,625 iterations of the 145,000 captions), batch 64, AdamW (paper); lr 2e-4 with the
# towers at 0.1 x (LAPS), cosine after one epoch of warm-up (xmr's choice).
_base_ = [
    '../_base_/models/cdds_vit-bert-b16.py',
    '../_base_/evaluation/cdds_flickr30k.py',
    '../_base_/schedules/cdds_vit-bert-b16_phases.py',
    '../_base_/default_runtime.py',
]

# ViT-B/16 at 224 px; normalisation comes from the backbone (timm's statistics).
_image_transform = dict(_delete_=True, type='MediaTransform', backbone=None, size=224,
                       resize_mode='shortest', interpolation='bicubic')
train_dataloader = dict(dataset=dict(transform=_image_transform))
val_dataloader = dict(dataset=dict(transform=_image_transform))
test_dataloader = dict(dataset=dict(transform=_image_transform))

train_cfg = dict(val_interval={{_base_.epoch}})
default_hooks = dict(checkpoint=dict(interval={{_base_.epoch}}))
