# DASD demo ablation (Table 5, f^sr only): the generator reads f^sr alone; no f^sa stream,
# discriminator or L_adv.
_base_ = ['./dasd_tiny-clip_synthetic.py']

model = dict(disentangler=dict(features=['sr'], use_adversarial=False))
