# XTD10, Cross-lingual Finetune setting (PECTVLM's few-shot protocol): finetune on the 50 train
# images of the seeded split, pairing each English caption with the same image's human caption
# in every other language (target_field='captions'); evaluated as xtd10_eval.py says.
# Prepare with tools/data/prepare_xtd10.py --few-shot 50 --seed 42.
_base_ = ['./train_loaders.py', './xtd10_eval.py']

train_dataloader = dict(
    # PECTVLM trains with 5 images per batch; 50 images x 10 languages give 500 pairs.
    batch_size=5, num_workers=2,
    dataset=dict(type='CaptionPairDataset', data_root=_base_.data_root,
                 data_prefix=_base_.data_prefix,
                 ann_file='xtd10/annotations/xtd10_fewshot50_seed42_train.json',
                 target_langs=_base_.target_langs, target_field='captions',
                 transform=_base_.media_transform))
text_train_dataloader = None
source_finetune_dataloader = None
