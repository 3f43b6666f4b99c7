# XTD10's evaluation, shared by its Cross-lingual Finetune and Zero-shot settings: PECTVLM's
# seed-42 split of the 1,000 images, model selection on its 50 val images and the test on the
# 900 others (mean of R@1 both ways), in English and the ten other XTD10 languages.
# full_test_dataloader holds all 1,000 images for the M-CLIP convention (text->image R@10), whose
# gallery includes those 50 val images and the 50 train images xtd10_clft.py finetunes on: a
# zero-shot protocol, held out only for a model that never trained on XTD10 -- say which
# protocol a number uses.
# Prepare with tools/data/prepare_xtd10.py --few-shot 50 --seed 42 (COCO images under
# data/mscoco/images).
_base_ = ['./eval_loaders.py']
data_root = 'data'
data_prefix = dict(media='mscoco/images')
target_langs = ['de', 'fr', 'es', 'it', 'ja', 'ko', 'pl', 'ru', 'tr', 'zh']
eval_langs = ['en', *target_langs]
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')


def _gallery(ann_file):
    return dict(num_workers=4, dataset=dict(
        type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
        ann_file=ann_file, languages=eval_langs, transform=media_transform))


val_dataloader = _gallery('xtd10/annotations/xtd10_fewshot50_seed42_val.json')
test_dataloader = _gallery('xtd10/annotations/xtd10_fewshot50_seed42_test.json')
full_test_dataloader = dict(_base_.test_dataloader,
                            **_gallery('xtd10/annotations/xtd10_test.json'))
