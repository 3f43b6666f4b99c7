# DASD Table 6, without L_adv: no discriminator; f^sa is still computed and feeds the generator,
# but nothing pushes the caption's meaning out of it.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(disentangler=dict(use_adversarial=False))
