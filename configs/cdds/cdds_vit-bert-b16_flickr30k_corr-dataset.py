# CDDS's Table 5, "once over the dataset": the column correlation reads statistics of the whole
# training set, which CDDSCorrelationHook recomputes (semantic components in eval mode, no
# gradient) before training and after every pass over the data.
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(disentangler=dict(correlation=dict(mode='dataset')))
custom_hooks = [*_base_.custom_hooks, dict(type='CDDSCorrelationHook', interval=None)]
