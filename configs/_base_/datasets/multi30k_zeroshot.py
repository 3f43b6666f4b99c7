# Multi30K, Zero-shot setting: train on CC300K (English Conceptual Captions with UC2's machine
# translations), never on Multi30K; validate on Multi30K val and test on test_2016_flickr.
# Prepare with tools/data/prepare_cc3m.py --subset-size 300000 and tools/data/prepare_multi30k.py.
_base_ = ['./cc300k_train.py']
data_root = 'data/multi30k'
data_prefix = dict(media='flickr30k-images')
target_langs = ['de', 'fr', 'cs']
eval_langs = ['en', 'de', 'fr', 'cs']


def _gallery(ann_file):
    return dict(type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
                ann_file=ann_file, languages=eval_langs, transform=_base_.media_transform)


train_dataloader = dict(dataset=dict(target_langs=target_langs))
text_train_dataloader = dict(dataset=dict(target_langs=target_langs))
val_dataloader = dict(dataset=_gallery('annotations/multi30k_val.json'))
test_dataloader = dict(dataset=_gallery('annotations/multi30k_test.json'))
