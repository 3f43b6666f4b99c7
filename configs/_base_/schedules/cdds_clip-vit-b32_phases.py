# CDDS on CLIP (the paper's CLIP setting), the recipe of cdds_vit-bert-b16_phases.py with CLIP's
# Adam settings: CLIP is already aligned, so its towers fine-tune gently (0.1 x a 1e-4 rate) while
# the UNets learn at 1e-4. The validation before training scores what the run starts from:
# patch-word matching through the untrained UNets, not CLIP's own zero-shot retrieval.
_base_ = ['./cdds_vit-bert-b16_phases.py']

train_cfg = dict(phases=[dict(_base_.train_cfg.phases[0], lr=1e-4, validate_at_start=True)])
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    constructor='PhasedOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=1e-4),
    clip_grad=dict(max_norm=2.0))
