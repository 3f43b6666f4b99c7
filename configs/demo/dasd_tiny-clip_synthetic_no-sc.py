# DASD demo ablation (Table 6, without L_sc): f^sr still feeds the generator, unsupervised.
_base_ = ['./dasd_tiny-clip_synthetic.py']

model = dict(disentangler=dict(use_consistency_loss=False))
