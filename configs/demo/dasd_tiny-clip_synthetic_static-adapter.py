# DASD demo ablation (Table 4, "no W^z"): static bottleneck adapters of DASD's width d_u = 32
# instead of the dynamic ones, no semantics disentangling module, no L_adv / L_sc. Same data,
# seed, phases and steps as dasd_tiny-clip_synthetic.py.
_base_ = ['./dasd_tiny-clip_synthetic.py']

model = dict(
    language_branch=dict(adapters=dict(_delete_=True, type='StaticAdapter', hidden=32)),
    disentangler=None)
