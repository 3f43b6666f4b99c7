# A variant, not a row of CDDS's Table 3: cdds_vit-bert-b16_flickr30k.py without distribution
# sampling (no x-semantic components, L_s contrasts the semantic components of the two modalities
# directly, no L_x). The paper studies distribution sampling as a plug-in instead (Table 4,
# dual-encoder-ds_vit-bert-b16_flickr30k.py). Without sampling there is no column correlation to
# configure (a correlation left set fails the build, naming both switches).
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(disentangler=dict(use_distribution_sampling=False, correlation=None))
