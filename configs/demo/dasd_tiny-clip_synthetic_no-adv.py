# DASD demo ablation (Table 6, without L_adv): no discriminator; f^sa still feeds the generator.
_base_ = ['./dasd_tiny-clip_synthetic.py']

model = dict(disentangler=dict(use_adversarial=False))
