# Multi30K, Cross-lingual Finetune setting: the English Multi30K training captions with their
# machine translations into de/fr/cs (MT(DTD), docs/data.md), validation on the val split and
# test on test_2016_flickr (task 1: one caption per image and language).
# Prepare with tools/data/prepare_multi30k.py (--translations de=... fr=... cs=...).
_base_ = ['./loaders.py']
data_root = 'data/multi30k'
data_prefix = dict(media='flickr30k-images')
target_langs = ['de', 'fr', 'cs']
eval_langs = ['en', 'de', 'fr', 'cs']
# uint8 resize + crop of the backbone's open_clip preprocessing; match it to the model config.
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')


def _train_captions(**options):
    """The Multi30K training captions; ``options`` pick what a loader reads of them."""
    return dict(type='CaptionPairDataset', data_root=data_root, data_prefix=data_prefix,
                ann_file='annotations/multi30k_train.json', transform=media_transform,
                **options)


def _gallery(ann_file):
    return dict(type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
                ann_file=ann_file, languages=eval_langs, transform=media_transform)


train_dataloader = dict(dataset=_train_captions(target_langs=target_langs))
# Text-only pairs for phases that never look at the image (cross-lingual alignment).
text_train_dataloader = dict(
    _base_.train_dataloader, num_workers=2,
    dataset=_train_captions(target_langs=target_langs, with_media=False))
# English captions alone, for the optional source finetune of CLIP (CL-FT stage 0): the 29,000
# captions at batch 128 give 226 iterations per epoch (drop_last), 1,130 in DASD's 5 epochs.
source_finetune_dataloader = dict(_base_.train_dataloader,
                                  dataset=_train_captions(source_only=True))
val_dataloader = dict(dataset=_gallery('annotations/multi30k_val.json'))
test_dataloader = dict(dataset=_gallery('annotations/multi30k_test.json'))
