# CDDS's recipe for its own ViT-B/16 + BERT towers (paper: 25 epochs, batch 64, AdamW): one phase
# in which the towers (at 0.1 x the rate, as in LAPS) train with the CDDS UNets on the CDDS terms
# alone (Eq. 15); lr 2e-4, cosine after a warm-up of 4% (one epoch of 25, xmr's choice),
# validated after every epoch. The epochs become iterations of the runner's train_dataloader when
# the loop is built (25 x its batches per pass, per process under DDP, logged), so they stay
# epochs at any batch size (docs/configs.md); the configs set the checkpoint interval in epochs.
train_cfg = dict(
    type='PhasedTrainLoop',
    val_interval=dict(epochs=1),
    phases=[
        dict(name='cdds', epochs=25, lr=2e-4, warmup_ratio=0.04, schedule='cosine',
             trainable=['backbone', 'disentangler'], lr_mult={'backbone': 0.1},
             loss_weights=dict(disentangler=1.0)),
    ])
# The linear maps into the joint space are new layers: their own groups, at the full rate.
optim_wrapper = dict(
    type='OptimWrapper',
    constructor='PhasedOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=2e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4),
    clip_grad=dict(max_norm=2.0),
    paramwise_cfg=dict(groups=['backbone', 'backbone.vision_proj',
                               'backbone.text_tower.text_proj', 'disentangler', 'losses']))
param_scheduler = None
