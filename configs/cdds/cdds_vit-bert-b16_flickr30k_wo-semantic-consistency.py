# CDDS's Table 3: cdds_vit-bert-b16_flickr30k.py without the semantic consistency constraint.
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(disentangler=dict(use_semantic_consistency=False))
