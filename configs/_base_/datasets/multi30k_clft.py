# Multi30K, Cross-lingual Finetune setting: the English Multi30K training captions with their
# machine translations into de/fr/cs (MT(DTD), docs/data.md), validation on the val split and
# test on test_2016_flickr (task 1: one caption per image and language).
# Prepare with tools/data/prepare_multi30k.py (--translations de=... fr=... cs=...).
data_root = 'data/multi30k'
data_prefix = dict(media='flickr30k-images')
target_langs = ['de', 'fr', 'cs']
eval_langs = ['en', 'de', 'fr', 'cs']
# uint8 resize + crop of the backbone's open_clip preprocessing; match it to the model config.
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')

train_dataloader = dict(
    batch_size=128, num_workers=8, persistent_workers=True, drop_last=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='xmr.retrieval_collate'),
    dataset=dict(type='CaptionPairDataset', data_root=data_root, data_prefix=data_prefix,
                 ann_file='annotations/multi30k_train.json', target_langs=target_langs,
                 transform=media_transform))
# Text-only pairs for phases that never look at the image (cross-lingual alignment).
text_train_dataloader = dict(
    batch_size=128, num_workers=2, persistent_workers=True, drop_last=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='xmr.retrieval_collate'),
    dataset=dict(type='CaptionPairDataset', data_root=data_root, data_prefix=data_prefix,
                 ann_file='annotations/multi30k_train.json', target_langs=target_langs,
                 transform=media_transform, with_media=False))
# English captions alone, for the optional source finetune of CLIP (CL-FT stage 0).
source_finetune_dataloader = dict(
    batch_size=128, num_workers=8, persistent_workers=True, drop_last=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='xmr.retrieval_collate'),
    dataset=dict(type='CaptionPairDataset', data_root=data_root, data_prefix=data_prefix,
                 ann_file='annotations/multi30k_train.json', source_only=True,
                 transform=media_transform))
val_dataloader = dict(
    batch_size=128, num_workers=8, persistent_workers=True, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='xmr.retrieval_collate'),
    dataset=dict(type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
                 ann_file='annotations/multi30k_val.json', languages=eval_langs,
                 transform=media_transform))
test_dataloader = dict(
    batch_size=128, num_workers=8, persistent_workers=True, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='xmr.retrieval_collate'),
    dataset=dict(type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
                 ann_file='annotations/multi30k_test.json', languages=eval_langs,
                 transform=media_transform))
