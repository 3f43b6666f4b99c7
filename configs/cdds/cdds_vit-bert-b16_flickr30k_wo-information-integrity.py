# CDDS's Table 3: cdds_vit-bert-b16_flickr30k.py without the information integrity constraint
# (neither L_f nor L_x: both reconstruct the tokens).
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(disentangler=dict(use_information_integrity=False))
