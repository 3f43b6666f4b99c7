# CDDS on Swin-B at 384 px + BERT, Flickr30K: cdds_vit-bert-b16_flickr30k.py with the paper's
# Swin-384 setting: the final 12 x 12 patches of Swin-B (window 12) at 384 px (towers:
# ../_base_/models/cdds_vit-bert-b16.py).
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(backbone=_base_.swin_b_384_tower)
train_dataloader = val_dataloader = test_dataloader = _base_.images_384
