# CDDS on ViT-B/16 at 384 px + BERT, MSCOCO: cdds_vit-bert-b16_mscoco.py with the paper's ViT-384
# setting: 24 x 24 patches + CLS (577 image tokens) (towers: ../_base_/models/cdds_vit-
# bert-b16.py).
_base_ = ['./cdds_vit-bert-b16_mscoco.py']

model = dict(backbone=_base_.vit_b16_384_tower)
train_dataloader = val_dataloader = test_dataloader = _base_.images_384
