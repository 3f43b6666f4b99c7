# DASD Table 5, f^sr only: the generator reads the semantic-related feature alone
# (z = MLP(f^sr)); the semantic-agnostic stream, the discriminator and L_adv are not built.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(disentangler=dict(features=['sr'], use_adversarial=False))
