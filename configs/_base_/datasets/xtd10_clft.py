# XTD10, Cross-lingual Finetune setting (PECTVLM's few-shot protocol): finetune on the 50 train
# images of the seeded split, pairing each English caption with the same image's human caption
# in every other language (target_field='captions'), select on the 50 val images, test on the
# other 900 (mean of R@1 both ways). Prepare with
# tools/data/prepare_xtd10.py --few-shot 50 --seed 42 (COCO images under data/mscoco/images).
data_root = 'data'
data_prefix = dict(media='mscoco/images')
target_langs = ['de', 'fr', 'es', 'it', 'ja', 'ko', 'pl', 'ru', 'tr', 'zh']
eval_langs = ['en', 'de', 'fr', 'es', 'it', 'ja', 'ko', 'pl', 'ru', 'tr', 'zh']
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')

train_dataloader = dict(
    # PECTVLM trains with 5 images per batch; 50 images x 10 languages give 500 pairs.
    batch_size=5, num_workers=2, persistent_workers=True, drop_last=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='xmr.retrieval_collate'),
    dataset=dict(type='CaptionPairDataset', data_root=data_root, data_prefix=data_prefix,
                 ann_file='xtd10/annotations/xtd10_fewshot50_train.json',
                 target_langs=target_langs, target_field='captions',
                 transform=media_transform))
val_dataloader = dict(
    batch_size=128, num_workers=4, persistent_workers=True, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='xmr.retrieval_collate'),
    dataset=dict(type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
                 ann_file='xtd10/annotations/xtd10_fewshot50_val.json', languages=eval_langs,
                 transform=media_transform))
test_dataloader = dict(
    batch_size=128, num_workers=4, persistent_workers=True, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='xmr.retrieval_collate'),
    dataset=dict(type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
                 ann_file='xtd10/annotations/xtd10_fewshot50_test.json', languages=eval_langs,
                 transform=media_transform))
