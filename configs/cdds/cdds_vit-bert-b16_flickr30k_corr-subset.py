# CDDS's Table 5, "random subset": the column correlation reads half of each batch's samples.
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(disentangler=dict(correlation=dict(mode='subset', subset_ratio=0.5)))
