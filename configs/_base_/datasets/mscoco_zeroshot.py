# MSCOCO, Zero-shot setting: train on CC300K (English Conceptual Captions with UC2's machine
# translations into ja and zh), never on COCO; evaluate ja on STAIR Captions of the Karpathy
# splits and zh on COCO-CN. Prepare with tools/data/prepare_cc3m.py --subset-size 300000 and
# tools/data/prepare_mscoco.py.
cc_root = 'data/cc3m'
cc_prefix = dict(media='images')
data_root = 'data/mscoco'
data_prefix = dict(media='images')
target_langs = ['ja', 'zh']
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')


def _retrieval_loader(ann_file, languages):
    return dict(
        batch_size=128, num_workers=8, persistent_workers=True, drop_last=False,
        sampler=dict(type='DefaultSampler', shuffle=False),
        collate_fn=dict(type='xmr.retrieval_collate'),
        dataset=dict(type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
                     ann_file=ann_file, languages=languages, transform=media_transform))


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
val_dataloader = _retrieval_loader('annotations/coco_val.json', ['en', 'ja'])
zh_val_dataloader = _retrieval_loader('annotations/cococn_val.json', ['zh'])
test_dataloader = _retrieval_loader('annotations/coco_test5k.json', ['en', 'ja'])
test1k_fold_dataloaders = [_retrieval_loader(f'annotations/coco_test1k_fold{fold}.json',
                                             ['en', 'ja']) for fold in range(5)]
zh_test_dataloader = _retrieval_loader('annotations/cococn_test.json', ['zh'])
