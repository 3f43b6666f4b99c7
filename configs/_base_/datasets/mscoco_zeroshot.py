# MSCOCO, Zero-shot setting: train on CC300K (English Conceptual Captions with UC2's machine
# translations into ja and zh), never on COCO; evaluate ja on STAIR Captions of the Karpathy
# splits and zh on COCO-CN. Prepare with tools/data/prepare_cc3m.py --subset-size 300000 and
# tools/data/prepare_mscoco.py.
_base_ = ['./cc300k_train.py']
data_root = 'data/mscoco'
data_prefix = dict(media='images')
target_langs = ['ja', 'zh']


def _retrieval_loader(ann_file, languages):
    return dict(_base_.val_dataloader,
                dataset=dict(type='RetrievalDataset', data_root=data_root,
                             data_prefix=data_prefix, ann_file=ann_file, languages=languages,
                             transform=_base_.media_transform))


train_dataloader = dict(dataset=dict(target_langs=target_langs))
text_train_dataloader = dict(dataset=dict(target_langs=target_langs))
val_dataloader = _retrieval_loader('annotations/coco_val.json', ['en', 'ja'])
zh_val_dataloader = _retrieval_loader('annotations/cococn_val.json', ['zh'])
test_dataloader = _retrieval_loader('annotations/coco_test5k.json', ['en', 'ja'])
test1k_fold_dataloaders = [_retrieval_loader(f'annotations/coco_test1k_fold{fold}.json',
                                             ['en', 'ja']) for fold in range(5)]
zh_test_dataloader = _retrieval_loader('annotations/cococn_test.json', ['zh'])
