# Multi30K as text pairs alone (no images): the German task-1 captions (human translations of the
# English ones) against their English sources, for a text-only teacher or the cross-lingual
# phase. Validation and test rank the German captions against the English ones of the same image
# (RetrievalMetric protocol 'text_to_text': R@K both ways, AR and mAR as for images).
# Prepare with: xmr data prepare_multi30k --raw-dir ... --image-splits-dir ... --text-only
#   --languages en de --splits train val test --out-dir data/multi30k/annotations
_base_ = ['./train_loaders.py', './eval_loaders.py']
data_root = 'data/multi30k'
target_langs = ['de']
eval_langs = ['en', *target_langs]

train_dataloader = dict(
    batch_size=32, num_workers=0, persistent_workers=False,
    dataset=dict(type='CaptionPairDataset', data_root=data_root,
                 ann_file='annotations/multi30k_train.json', target_field='captions',
                 target_langs=target_langs))
val_dataloader = dict(
    batch_size=128, num_workers=0, persistent_workers=False,
    dataset=dict(type='RetrievalDataset', data_root=data_root,
                 ann_file='annotations/multi30k_val.json', languages=eval_langs))
test_dataloader = dict(
    batch_size=128, num_workers=0, persistent_workers=False,
    dataset=dict(type='RetrievalDataset', data_root=data_root,
                 ann_file='annotations/multi30k_test.json', languages=eval_langs))
val_evaluator = dict(type='RetrievalMetric', protocol='text_to_text')
test_evaluator = val_evaluator
# The pairs are text already: no other training loader.
text_train_dataloader = source_finetune_dataloader = None
