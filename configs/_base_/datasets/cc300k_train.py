# The training loaders of the Zero-shot settings: CC300K, English Conceptual Captions with UC2's
# machine translations (into de, fr, cs, ja and zh), image-caption pairs and text-only pairs
# (no source finetune: a zero-shot setting keeps the pretrained model). Each *_zeroshot.py
# inherits this file beside its benchmark's evaluation part and sets target_langs on both
# loaders. Prepare with tools/data/prepare_cc3m.py --subset-size 300000.
_base_ = ['./train_loaders.py']
cc300k_captions = dict(
    type='CaptionPairDataset', data_root='data/cc3m', data_prefix=dict(media='images'),
    ann_file='annotations/cc300k_train.json',
    transform=dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai'))

train_dataloader = dict(dataset=cc300k_captions)
text_train_dataloader = dict(dataset=cc300k_captions)
source_finetune_dataloader = None
