# Multi30K, Cross-lingual Finetune setting: the English Multi30K training captions with their
# machine translations into de/fr/cs (MT(DTD), docs/data.md), evaluated as multi30k_eval.py says.
# The source finetune reads task 2's 145,000 English captions (five an image, as DASD's
# get_m30k reads MLA's task2/annotation/train_en.json): 1,132 iterations per epoch at batch 128
# (drop_last), 5,660 in DASD's 5 epochs. Prepare with tools/data/prepare_multi30k.py, task 2's
# files in its --raw-dir (--translations de=... fr=... cs=...).
_base_ = ['./train_loaders.py', './multi30k_eval.py']
train_captions = dict(type='CaptionPairDataset', data_root=_base_.data_root,
                      data_prefix=_base_.data_prefix, ann_file='annotations/multi30k_train.json',
                      transform=_base_.media_transform)

train_dataloader = dict(dataset=dict(train_captions, target_langs=_base_.target_langs))
text_train_dataloader = dict(dataset=dict(train_captions, target_langs=_base_.target_langs))
source_finetune_dataloader = dict(dataset=dict(
    train_captions, ann_file='annotations/multi30k_train_5captions.json'))
