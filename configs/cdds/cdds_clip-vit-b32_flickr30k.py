# CDDS on CLIP ViT-B/32 (OpenAI weights), Flickr30K English image-text retrieval (the paper's
# CLIP setting). Data as in cdds_vit-bert-b16_flickr30k.py (Multi30K's Flickr30K images and
# English captions, five test captions per image) with CLIP's own preprocessing. CLIP is already
# aligned, so its towers fine-tune gently (0.1 x a 1e-4 rate) while the UNets learn at 1e-4.
_base_ = [
    '../_base_/models/cdds_clip-vit-b32.py',
    '../_base_/datasets/multi30k_clft.py',
    '../_base_/default_runtime.py',
]

batch_size = 64
train_pairs = 29000
epoch = train_pairs // batch_size
num_epochs = 25
total_iters = num_epochs * epoch

train_dataloader = dict(batch_size=batch_size,
                        dataset=dict(source_only=True, target_langs=None))
val_dataloader = dict(dataset=dict(languages=['en']))
test_dataloader = dict(dataset=dict(ann_file='annotations/multi30k_test_5captions.json',
                                    languages=['en']))
val_evaluator = dict(type='RetrievalMetric', languages=['en'], source_language='en',
                     mean_languages=['en'])
test_evaluator = val_evaluator

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
default_hooks = dict(checkpoint=dict(interval=epoch))
