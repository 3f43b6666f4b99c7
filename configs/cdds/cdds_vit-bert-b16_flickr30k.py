# CDDS on ViT-B/16 + BERT, Flickr30K English image-text retrieval (the paper's main setting).
# Flickr30K is read through xmr's Multi30K annotations (docs/data.md): the Flickr30K images in
# the 29,000 / 1,014 / 1,000 split. Training reads the one English caption per image of Multi30K
# task 1 (the paper trains on all five Flickr30K captions: a five-caption annotation file in the
# same schema drops in as ann_file); the test reads the five original English captions of each
# test image (multi30k_test_5captions.json, task 2). Schedule: 25 epochs, batch 64, AdamW (paper);
# lr 2e-4 with the towers at 0.1 x (LAPS), cosine after one epoch of warm-up (xmr's choice).
_base_ = [
    '../_base_/models/cdds_vit-bert-b16.py',
    '../_base_/datasets/multi30k_clft.py',
    '../_base_/default_runtime.py',
]

# ViT-B/16 at 224 px; normalisation comes from the backbone (timm's statistics).
_image_transform = dict(_delete_=True, type='MediaTransform', backbone=None, size=224,
                       resize_mode='shortest', interpolation='bicubic')
batch_size = 64
train_pairs = 29000
epoch = train_pairs // batch_size
num_epochs = 25
total_iters = num_epochs * epoch

train_dataloader = dict(
    batch_size=batch_size,
    dataset=dict(source_only=True, target_langs=None, transform=_image_transform))
val_dataloader = dict(dataset=dict(languages=['en'], transform=_image_transform))
test_dataloader = dict(dataset=dict(ann_file='annotations/multi30k_test_5captions.json',
                                    languages=['en'], transform=_image_transform))
val_evaluator = dict(type='RetrievalMetric', languages=['en'], source_language='en',
                     mean_languages=['en'])
test_evaluator = val_evaluator

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
# The linear maps into the joint space are new layers: their own groups, at the full rate.
optim_wrapper = dict(
    type='OptimWrapper',
    constructor='PhasedOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=2e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4),
    clip_grad=dict(max_norm=2.0),
    paramwise_cfg=dict(groups=['backbone', 'backbone.vision_proj',
                               'backbone.text_tower.text_proj', 'disentangler', 'losses']))
param_scheduler = None
default_hooks = dict(checkpoint=dict(interval=epoch))
