# DASD Table 5, f^sr only: the generator reads the semantic-related feature alone
# (z = MLP(f^sr)); the semantic-agnostic stream, the discriminator and L_adv are not built.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(disentangler=dict(features=['sr'], use_adversarial=False))
train_cfg = dict(phases=[
    dict(phase, loss_weights={k: v for k, v in phase['loss_weights'].items() if k != 'adv'})
    for phase in _base_.train_cfg['phases']])
