# The bundled demo (README): on 2 CPU cores, no downloads, in about 4 to 6 minutes.
#   1. source_finetune: a tiny CLIP learns English retrieval on the synthetic pairs (towers train);
#   2. cross_lingual: towers frozen, static adapters + target embeddings align r^T to r^S (MSE);
#   3. cross_modal: the same modules align r^T to the images (InfoNCE).
# The phase report at the end lists AR per language after each phase: the English teacher and
# each target language before (column "source_finetune end") and after alignment.
_base_ = [
    '../_base_/models/static-adapter_tiny-clip.py',
    '../_base_/datasets/synthetic.py',
    '../_base_/schedules/alignment_phases.py',
    '../_base_/default_runtime.py',
]

train_cfg = dict(
    type='PhasedTrainLoop',
    val_interval=0,
    _delete_=True,
    phases=[
        dict(name='source_finetune', iters=700, lr=2e-3, warmup_ratio=0.05, schedule='cosine',
             trainable=['backbone', 'losses.source_cm'], loss_weights=dict(source_cm=1.0),
             dataloader='source_finetune_dataloader'),
        # 'target' (the language branch, plus a disentangler when the model has one) and the
        # 'disentangler' scale (a no-op without one) let the DASD variants share this schedule.
        dict(name='cross_lingual', iters=700, lr=2e-3, warmup_ratio=0.1, schedule='cosine',
             trainable=['target'], loss_weights=dict(cl=1.0, disentangler=1.0),
             cache_features=True),
        dict(name='cross_modal', iters=200, lr=1e-4, warmup_ratio=0.1, schedule='cosine',
             trainable=['target'], loss_weights=dict(cm=1.0, disentangler=1.0),
             cache_features=True),
    ])
optim_wrapper = dict(optimizer=dict(lr=2e-3, weight_decay=0.05))

default_hooks = dict(
    logger=dict(interval=100),
    checkpoint=dict(interval=500, save_last=True, save_best='mAR'))
randomness = dict(seed=0)
