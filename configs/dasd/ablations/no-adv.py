# DASD Table 6, without L_adv: no discriminator; f^sa is still computed and feeds the generator,
# but nothing pushes the caption's meaning out of it.
model = dict(disentangler=dict(use_adversarial=False))
