# The training loaders of the Zero-shot settings: CC300K, English Conceptual Captions with UC2's
# machine translations (into de, fr, cs, ja and zh), image-caption pairs and text-only pairs.
# Each *_zeroshot.py inherits this file beside its evaluation loaders, sets target_langs on both
# loaders and adds its galleries. Prepare with tools/data/prepare_cc3m.py --subset-size 300000.
_base_ = ['./train_loaders.py']
cc_root = 'data/cc3m'
cc_prefix = dict(media='images')
cc_media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')


def _cc300k(**options):
    return dict(type='CaptionPairDataset', data_root=cc_root, data_prefix=cc_prefix,
                ann_file='annotations/cc300k_train.json', transform=cc_media_transform,
                **options)


train_dataloader = dict(dataset=_cc300k())
text_train_dataloader = dict(_base_.train_dataloader, num_workers=2,
                             dataset=_cc300k(with_media=False))
