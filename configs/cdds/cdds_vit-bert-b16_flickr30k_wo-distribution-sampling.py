# CDDS's Table 3: cdds_vit-bert-b16_flickr30k.py without distribution sampling: no x-semantic
# components, L_s contrasts the semantic components of the two modalities directly, no L_x.
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(disentangler=dict(use_distribution_sampling=False))
