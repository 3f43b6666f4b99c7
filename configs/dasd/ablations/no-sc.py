# DASD Table 6, without L_sc: f^sr is still computed and feeds the generator, but nothing ties it
# to the source embedding r^S.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(disentangler=dict(use_consistency_loss=False))
train_cfg = dict(phases=[
    dict(phase, loss_weights={k: v for k, v in phase['loss_weights'].items() if k != 'sc'})
    for phase in _base_.train_cfg['phases']])
