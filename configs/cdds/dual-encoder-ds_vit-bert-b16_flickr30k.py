# Distribution sampling plugged into xmr's InfoNCE dual encoder, next to its InfoNCE (the way
# CDDS's Table 4 plugs it into its bases; this base is not one of the paper's).
_base_ = ['./dual-encoder_vit-bert-b16_flickr30k.py']

model = dict(losses=dict(distribution_sampling={{_base_.distribution_sampling_loss}}))
train_cfg = dict(phases=[dict(_base_.dual_encoder_phase, name='dual_encoder_ds',
                              loss_weights=dict(itc=1.0, distribution_sampling=1.0))])
