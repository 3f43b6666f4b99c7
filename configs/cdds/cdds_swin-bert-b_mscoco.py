# CDDS on Swin-B + BERT, MSCOCO: cdds_vit-bert-b16_mscoco.py with the paper's Swin setting: the
# final 7 x 7 patches of Swin-B at 224 px (width 1024, linearly mapped to 512), images at 224 px as
# for ViT-B/16 (towers: ../_base_/models/cdds_vit-bert-b16.py).
_base_ = ['./cdds_vit-bert-b16_mscoco.py']

model = dict(backbone=_base_.swin_b_tower)
