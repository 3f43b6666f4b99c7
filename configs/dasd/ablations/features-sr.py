# DASD Table 5, f^sr only: the generator reads the semantic-related feature alone
# (z = MLP(f^sr)); the semantic-agnostic stream, the discriminator and L_adv are not built.
model = dict(disentangler=dict(features=['sr'], use_adversarial=False))
