# DASD demo ablation (Table 5, f^sr only): the generator reads f^sr alone; no f^sa stream,
# discriminator or L_adv.
_base_ = ['./dasd_tiny-clip_synthetic.py']

model = dict(disentangler=dict(features=['sr'], use_adversarial=False))
train_cfg = dict(phases=[
    dict(phase, loss_weights={k: v for k, v in phase['loss_weights'].items() if k != 'adv'})
    for phase in _base_.train_cfg['phases']])
