# DASD demo ablation (Table 5, f^sa only): the generator reads f^sa alone; no f^sr stream,
# projection or L_sc.
_base_ = ['./dasd_tiny-clip_synthetic.py']

model = dict(disentangler=dict(features=['sa'], use_consistency_loss=False))
