# Multi-MSRVTT, Cross-lingual Finetune setting: the 7k training videos' English captions with
# their machine translations into the eight target languages (MT(DTD), docs/data.md), 12 frames
# a video; evaluated as msrvtt_eval.py says. The source finetune reads the 140,200 English
# captions: 1,095 iterations per epoch at batch 128 (drop_last), 5,475 in DASD's 5 epochs.
# Prepare with tools/data/prepare_msrvtt.py, then translate and attach the train and val captions
# (tools/data/export_source_captions.py, tools/data/attach_translations.py).
_base_ = ['./train_loaders.py', './msrvtt_eval.py']
train_captions = dict(type='CaptionPairDataset', data_root=_base_.data_root,
                      data_prefix=_base_.data_prefix, ann_file='annotations/msrvtt_train7k.json',
                      transform=_base_.media_transform)
train_videos = dict(train_captions, num_frames=12, on_corrupt=_base_.on_corrupt)

train_dataloader = dict(dataset=dict(train_videos, target_langs=_base_.target_langs))
text_train_dataloader = dict(dataset=dict(train_captions, target_langs=_base_.target_langs))
source_finetune_dataloader = dict(dataset=train_videos)
