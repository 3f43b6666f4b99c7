# CDDS on ViT-B/16 + BERT, MSCOCO English image-text retrieval (data:
# ../_base_/datasets/mscoco_en.py; 221,375 iterations in 25 epochs at batch 64). Same recipe as
# cdds_vit-bert-b16_flickr30k.py; a checkpoint every quarter epoch.
_base_ = [
    '../_base_/models/cdds_vit-bert-b16.py',
    '../_base_/evaluation/cdds_mscoco.py',
    '../_base_/schedules/cdds_vit-bert-b16_phases.py',
    '../_base_/default_runtime.py',
]

_image_transform = dict(_delete_=True, type='MediaTransform', backbone=None, size=224,
                       resize_mode='shortest', interpolation='bicubic')
train_dataloader = dict(dataset=dict(transform=_image_transform))
val_dataloader = dict(dataset=dict(transform=_image_transform))
test_dataloader = dict(dataset=dict(transform=_image_transform))

train_cfg = dict(val_interval=_base_.epoch)
default_hooks = dict(checkpoint=dict(interval=_base_.epoch // 4))
