# CDDS on the bundled synthetic data (docs/data_synthetic.md): no downloads, CPU, minutes.
#   1. towers: a tiny CLIP learns English retrieval from random weights on its own pooled
#      embeddings (tower_itc), so that CDDS, as in the paper, decouples pretrained towers' tokens;
#   2. cdds: the CDDS UNets train on the towers' patch and word tokens together with the towers
#      (CDDS losses + InfoNCE on the pooled semantic components + tower_itc).
# Retrieval always reads the semantic components: the "towers start/end" columns of the phase
# report are the untrained UNets', "cdds end" the trained ones. Pairs are scored as the paper does,
# by patch-word matching on every pair (bare keys; the best checkpoint's mAR), next to the cosine
# of the mean-pooled tokens (pooled/...) and, in the test, the re-ranking of the cosine's 20 best
# by patch-word matching (rerank/...).
#   python tools/train.py configs/cdds/cdds_tiny-clip_synthetic.py
_base_ = [
    '../_base_/models/cdds_tiny-clip.py',
    '../_base_/datasets/synthetic.py',
    '../_base_/default_runtime.py',
]

# English pairs only: the tiny CLIP's BPE tower reads English.
train_dataloader = dict(
    batch_size=64,
    dataset=dict(type='SyntheticPairDataset', num_scenes=20000, languages=[], split='train',
                 image_size=32, seed=0))
val_dataloader = dict(dataset=dict(languages=['en']))
test_dataloader = dict(dataset=dict(languages=['en']))
_metric = dict(type='RetrievalMetric', languages=['en'], source_language='en',
               mean_languages=['en'], scoring='tokens')
val_evaluator = [_metric, dict(_metric, scoring='embedding', prefix='pooled')]
test_evaluator = [
    _metric,
    dict(_metric, scoring='tokens_rerank', rerank_candidates=20, prefix='rerank'),
    dict(_metric, scoring='embedding', prefix='pooled'),
]

train_cfg = dict(
    type='PhasedTrainLoop',
    val_interval=0,
    phases=[
        dict(name='towers', iters=300, lr=2e-3, warmup_ratio=0.05, schedule='cosine',
             trainable=['backbone', 'losses.tower_itc'], validate_at_start=True,
             loss_weights=dict(tower_itc=1.0)),
        dict(name='cdds', iters=600, lr=1e-3, warmup_ratio=0.05, schedule='cosine',
             trainable=['backbone', 'disentangler', 'losses'],
             loss_weights=dict(disentangler=1.0, itc=1.0, tower_itc=1.0)),
    ])
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
optim_wrapper = dict(
    type='OptimWrapper',
    constructor='PhasedOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=1e-3, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.05),
    clip_grad=dict(max_norm=1.0))
param_scheduler = None

default_hooks = dict(
    logger=dict(interval=100),
    checkpoint=dict(interval=300, save_last=True, save_best='mAR'))
randomness = dict(seed=0)
