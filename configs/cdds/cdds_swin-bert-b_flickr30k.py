# CDDS on Swin-B + BERT, Flickr30K: cdds_vit-bert-b16_flickr30k.py with the paper's Swin
# setting: the final 7 x 7 patches of Swin-B at 224 px (width 1024, linearly mapped to 512);
# the weights of microsoft/swin-base-patch4-window7-224, which LAPS loads; images at 224 px as
# for ViT-B/16 (the loaders of cdds_vit-bert-b16_flickr30k.py).
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(backbone=dict(vision='swin_base_patch4_window7_224.ms_in22k_ft_in1k'))
