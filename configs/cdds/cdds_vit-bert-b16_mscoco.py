# CDDS on ViT-B/16 + BERT, MSCOCO English image-text retrieval (data:
# ../_base_/datasets/mscoco_en.py; 221,375 iterations in 25 epochs at batch 64). Same recipe as
# cdds_vit-bert-b16_flickr30k.py; a checkpoint every quarter epoch.
_base_ = [
    '../_base_/models/cdds_vit-bert-b16.py',
    '../_base_/evaluation/cdds_mscoco.py',
    '../_base_/schedules/cdds_vit-bert-b16_phases.py',
    '../_base_/default_runtime.py',
]

vit_images = dict(dataset=dict(transform=dict(_delete_=True, **_base_.vit_media_transform)))
train_dataloader = val_dataloader = test_dataloader = vit_images

default_hooks = dict(checkpoint=dict(interval=dict(_delete_=True, epochs=0.25)))
