# DASD demo ablation (Table 5, f^sa only): the generator reads f^sa alone; no f^sr stream,
# projection or L_sc.
_base_ = ['./dasd_tiny-clip_synthetic.py']

model = dict(disentangler=dict(features=['sa'], use_consistency_loss=False))
train_cfg = dict(phases=[
    dict(phase, loss_weights={k: v for k, v in phase['loss_weights'].items() if k != 'sc'})
    for phase in _base_.train_cfg['phases']])
