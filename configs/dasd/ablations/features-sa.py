# DASD Table 5, f^sa only: the generator reads the semantic-agnostic feature alone
# (z = MLP(f^sa)); the semantic-related stream, its projection W_p^sr and L_sc are not built.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(disentangler=dict(features=['sa'], use_consistency_loss=False))
train_cfg = dict(phases=[
    dict(phase, loss_weights={k: v for k, v in phase['loss_weights'].items() if k != 'sc'})
    for phase in _base_.train_cfg['phases']])
