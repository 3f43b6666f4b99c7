# CDDS on CLIP ViT-B/32 (OpenAI weights), MSCOCO English image-text retrieval: Karpathy train +
# restval, selection on the 5K val split, test on 5-fold 1K and 5K. Recipe of
# cdds_clip-vit-b32_flickr30k.py.
_base_ = [
    '../_base_/models/cdds_clip-vit-b32.py',
    '../_base_/datasets/mscoco_clft.py',
    '../_base_/default_runtime.py',
]

batch_size = 64
train_pairs = 566747
epoch = train_pairs // batch_size
num_epochs = 25
total_iters = num_epochs * epoch

train_dataloader = dict(batch_size=batch_size,
                        dataset=dict(source_only=True, target_langs=None))
val_dataloader = dict(dataset=dict(languages=['en']))
test_dataloader = dict(dataset=dict(languages=['en']))
val_evaluator = dict(type='RetrievalMetric', languages=['en'], source_language='en',
                     mean_languages=['en'])
test_evaluator = [
    dict(type='RetrievalMetric', languages=['en'], source_language='en', mean_languages=['en'],
         protocol='coco_1k_5fold', prefix='coco1k'),
    dict(type='RetrievalMetric', languages=['en'], source_language='en', mean_languages=['en'],
         protocol='coco_5k', prefix='coco5k'),
]

train_cfg = dict(
    type='PhasedTrainLoop',
    val_interval=epoch,
    phases=[
        dict(name='cdds', iters=total_iters, lr=1e-4, warmup_ratio=0.04, schedule='cosine',
             trainable=['backbone', 'disentangler', 'losses'], lr_mult={'backbone': 0.1},
             loss_weights=dict(disentangler=1.0, itc=1.0), validate_at_start=True),
    ])
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
optim_wrapper = dict(
    type='OptimWrapper',
    constructor='PhasedOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=1e-4),
    clip_grad=dict(max_norm=2.0))
param_scheduler = None
default_hooks = dict(checkpoint=dict(interval=epoch // 4))
