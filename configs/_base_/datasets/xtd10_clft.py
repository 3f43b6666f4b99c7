# XTD10, Cross-lingual Finetune setting (PECTVLM's few-shot protocol): finetune on the 50 train
# images of the seeded split, pairing each English caption with the same image's human caption
# in every other language (target_field='captions'), select on the 50 val images, test on the
# other 900 (mean of R@1 both ways). Prepare with
# tools/data/prepare_xtd10.py --few-shot 50 --seed 42 (COCO images under data/mscoco/images).
_base_ = ['./loaders.py']
data_root = 'data'
data_prefix = dict(media='mscoco/images')
target_langs = ['de', 'fr', 'es', 'it', 'ja', 'ko', 'pl', 'ru', 'tr', 'zh']
eval_langs = ['en', *target_langs]
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')


def _gallery(ann_file):
    return dict(type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
                ann_file=ann_file, languages=eval_langs, transform=media_transform)


train_dataloader = dict(
    # PECTVLM trains with 5 images per batch; 50 images x 10 languages give 500 pairs.
    batch_size=5, num_workers=2,
    dataset=dict(type='CaptionPairDataset', data_root=data_root, data_prefix=data_prefix,
                 ann_file='xtd10/annotations/xtd10_fewshot50_train.json',
                 target_langs=target_langs, target_field='captions',
                 transform=media_transform))
val_dataloader = dict(num_workers=4,
                      dataset=_gallery('xtd10/annotations/xtd10_fewshot50_val.json'))
test_dataloader = dict(num_workers=4,
                       dataset=_gallery('xtd10/annotations/xtd10_fewshot50_test.json'))
