# DASD demo ablation (Table 6, without L_sc): f^sr still feeds the generator, unsupervised.
_base_ = ['./dasd_tiny-clip_synthetic.py']

model = dict(disentangler=dict(use_consistency_loss=False))
train_cfg = dict(phases=[
    dict(phase, loss_weights={k: v for k, v in phase['loss_weights'].items() if k != 'sc'})
    for phase in _base_.train_cfg['phases']])
