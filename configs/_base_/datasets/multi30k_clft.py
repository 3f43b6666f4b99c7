# Multi30K, Cross-lingual Finetune setting: the English Multi30K training captions with their
# machine translations into de/fr/cs (MT(DTD), docs/data.md), evaluated as multi30k_eval.py says.
# The source finetune reads the 29,000 English captions: 226 iterations per epoch at batch 128
# (drop_last), 1,130 in DASD's 5 epochs. Prepare with tools/data/prepare_multi30k.py
# (--translations de=... fr=... cs=...).
_base_ = ['./train_loaders.py', './multi30k_eval.py']
train_captions = dict(type='CaptionPairDataset', data_root=_base_.data_root,
                      data_prefix=_base_.data_prefix, ann_file='annotations/multi30k_train.json',
                      transform=_base_.media_transform)

train_dataloader = dict(dataset=dict(train_captions, target_langs=_base_.target_langs))
text_train_dataloader = dict(dataset=dict(train_captions, target_langs=_base_.target_langs))
source_finetune_dataloader = dict(dataset=train_captions)
