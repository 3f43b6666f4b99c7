# Multi30K, Zero-shot setting: train on CC300K (English Conceptual Captions with UC2's machine
# translations), never on Multi30K; validate on Multi30K val and test on test_2016_flickr.
# Prepare with tools/data/prepare_cc3m.py --subset-size 300000 and tools/data/prepare_multi30k.py.
cc_root = 'data/cc3m'
cc_prefix = dict(media='images')
data_root = 'data/multi30k'
data_prefix = dict(media='flickr30k-images')
target_langs = ['de', 'fr', 'cs']
eval_langs = ['en', 'de', 'fr', 'cs']
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')

train_dataloader = dict(
    batch_size=128, num_workers=8, persistent_workers=True, drop_last=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='xmr.retrieval_collate'),
    dataset=dict(type='CaptionPairDataset', data_root=cc_root, data_prefix=cc_prefix,
                 ann_file='annotations/cc300k_train.json', target_langs=target_langs,
                 transform=media_transform))
text_train_dataloader = dict(
    batch_size=128, num_workers=2, persistent_workers=True, drop_last=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='xmr.retrieval_collate'),
    dataset=dict(type='CaptionPairDataset', data_root=cc_root, data_prefix=cc_prefix,
                 ann_file='annotations/cc300k_train.json', target_langs=target_langs,
                 transform=media_transform, with_media=False))
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
