# DASD Table 6, without L_adv: no discriminator; f^sa is still computed and feeds the generator,
# but nothing pushes the caption's meaning out of it.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(disentangler=dict(use_adversarial=False))
train_cfg = dict(phases=[
    dict(phase, loss_weights={k: v for k, v in phase['loss_weights'].items() if k != 'adv'})
    for phase in _base_.train_cfg['phases']])
