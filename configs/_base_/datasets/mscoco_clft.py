# MSCOCO, Cross-lingual Finetune setting: Karpathy train (train + restval) English captions with
# their machine translations into ja and zh (MT(DTD), docs/data.md), evaluated as mscoco_eval.py
# says. The source finetune reads the ~566.7k English captions: 4,427 iterations per epoch at
# batch 128 (drop_last), 22,135 in DASD's 5 epochs. Prepare with tools/data/prepare_mscoco.py
# (--stair-json ... --coco-cn-dir ... --translations ja=... zh=...).
_base_ = ['./train_loaders.py', './mscoco_eval.py']
train_captions = dict(type='CaptionPairDataset', data_root=_base_.data_root,
                      data_prefix=_base_.data_prefix, ann_file='annotations/coco_train.json',
                      transform=_base_.media_transform)

train_dataloader = dict(dataset=dict(train_captions, target_langs=_base_.target_langs))
text_train_dataloader = dict(dataset=dict(train_captions, target_langs=_base_.target_langs))
source_finetune_dataloader = dict(dataset=train_captions)
