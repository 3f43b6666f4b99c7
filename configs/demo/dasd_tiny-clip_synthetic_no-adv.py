# DASD demo ablation (Table 6, without L_adv): no discriminator; f^sa still feeds the generator.
_base_ = ['./dasd_tiny-clip_synthetic.py']

model = dict(disentangler=dict(use_adversarial=False))
train_cfg = dict(phases=[
    dict(phase, loss_weights={k: v for k, v in phase['loss_weights'].items() if k != 'adv'})
    for phase in _base_.train_cfg['phases']])
