# Multi30K's evaluation, shared by its Cross-lingual Finetune and Zero-shot settings: validation on
# the val split (1,014 images), test on test_2016 (1,000), English and the target languages,
# every language the gallery holds scored (RetrievalMetric's default). The galleries are those
# M3P, UC2, MLA and DASD score Multi30K on (DASD's multi30k_4lang_path.json): task 2's five en
# and five de captions an image, task 1's one fr and one cs caption. Task 1's galleries, one
# caption an image in every language (PECTVLM's), are multi30k_{val,test}.json: their en and de
# recalls are not comparable with those papers' tables (docs/data.md, Multi30K).
# Prepare with tools/data/prepare_multi30k.py, task 2's files in its --raw-dir.
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


val_dataloader = dict(dataset=_gallery('annotations/multi30k_val_5captions.json'))
test_dataloader = dict(dataset=_gallery('annotations/multi30k_test_5captions.json'))
val_evaluator = dict(type='RetrievalMetric')
test_evaluator = val_evaluator
