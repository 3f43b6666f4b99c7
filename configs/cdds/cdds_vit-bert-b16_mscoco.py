# CDDS on ViT-B/16 + BERT, MSCOCO English image-text retrieval: Karpathy train + restval
# (113,287 images, 566,747 captions), model selection on the 5K val split, test on the 5K test
# split under both COCO protocols (5-fold 1K, mean over folds; and 5K). Same recipe as
# cdds_vit-bert-b16_flickr30k.py.
_base_ = [
    '../_base_/models/cdds_vit-bert-b16.py',
    '../_base_/datasets/mscoco_clft.py',
    '../_base_/default_runtime.py',
]

_image_transform = dict(_delete_=True, type='MediaTransform', backbone=None, size=224,
                       resize_mode='shortest', interpolation='bicubic')
batch_size = 64
train_pairs = 566747
epoch = train_pairs // batch_size
num_epochs = 25
total_iters = num_epochs * epoch

train_dataloader = dict(
    batch_size=batch_size,
    dataset=dict(source_only=True, target_langs=None, transform=_image_transform))
val_dataloader = dict(dataset=dict(languages=['en'], transform=_image_transform))
test_dataloader = dict(dataset=dict(languages=['en'], transform=_image_transform))
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
        dict(name='cdds', iters=total_iters, lr=2e-4, warmup_ratio=0.04, schedule='cosine',
             trainable=['backbone', 'disentangler', 'losses'], lr_mult={'backbone': 0.1},
             loss_weights=dict(disentangler=1.0, itc=1.0)),
    ])
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
optim_wrapper = dict(
    type='OptimWrapper',
    constructor='PhasedOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=2e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4),
    clip_grad=dict(max_norm=2.0),
    paramwise_cfg=dict(groups=['backbone', 'backbone.vision_proj',
                               'backbone.text_tower.text_proj', 'disentangler', 'losses']))
param_scheduler = None
default_hooks = dict(checkpoint=dict(interval=epoch // 4))
