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

vit_images = dict(dataset=dict(transform=dict(_delete_=True, **_base_.vit_media_transform)))
train_dataloader = val_dataloader = test_dataloader = vit_images

default_hooks = dict(checkpoint=dict(interval=dict(_delete_=True, epochs=1)))
