# Multi30K's evaluation, shared by its Cross-lingual Finetune and Zero-shot settings: validation on
# the val split, test on test_2016_flickr (task 1: one caption per image and language), English
# and the target languages, every language the gallery holds scored (RetrievalMetric's default).
# Prepare with tools/data/prepare_multi30k.py.
_base_ = ['./eval_loaders.py']
data_root = 'data/multi30k'
data_prefix = dict(media='flickr30k-images')
target_langs = ['de', 'fr', 'cs']
eval_langs = ['en', *target_langs]
# uint8 resize + crop of the backbone's open_clip preprocessing; match it to the model config.
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')


def _gallery(ann_file):
    return dict(type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
                ann_file=ann_file, languages=eval_langs, transform=media_transform)


val_dataloader = dict(dataset=_gallery('annotations/multi30k_val.json'))
test_dataloader = dict(dataset=_gallery('annotations/multi30k_test.json'))
val_evaluator = dict(type='RetrievalMetric')
test_evaluator = val_evaluator
