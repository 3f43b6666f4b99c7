# The two alignment phases of a target-language branch (cross_lingual: L_CL on text pairs, then
# cross_modal: L_CM on media + captions) on DASD's optimiser (paper Sec. 4.1; REFERENCE.md): each
# starts at its own base LR with linear warm-up over 10% then cosine decay; Adam(0.9, 0.98),
# eps 1e-6, wd 0.2, clip 1.0, batch 128.
train_cfg = dict(
    type='PhasedTrainLoop',
    val_interval=5000,
    phases=[
        dict(name='cross_lingual', iters=45000, lr=2e-4, warmup_ratio=0.1, schedule='cosine',
             trainable=['language_branch'], loss_weights=dict(cl=1.0), cache_features=True),
        dict(name='cross_modal', iters=6000, lr=6e-6, warmup_ratio=0.1, schedule='cosine',
             trainable=['language_branch'], loss_weights=dict(cm=1.0), cache_features=True),
    ])

optim_wrapper = dict(
    type='OptimWrapper',
    constructor='PhasedOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=2e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2),
    clip_grad=dict(max_norm=1.0))
param_scheduler = None
