# CDDS's Table 4: distribution sampling plugged into VSE++, next to its hinge loss.
_base_ = ['./dual-encoder-vsepp_vit-bert-b16_flickr30k.py']

model = dict(losses=dict(distribution_sampling={{_base_.distribution_sampling_loss}}))
train_cfg = dict(phases=[dict(_base_.dual_encoder_phase, name='dual_encoder_ds',
                              loss_weights=dict(itc=1.0, distribution_sampling=1.0))])
