# CDDS in a cross-lingual setting: the dual encoder reads the target languages itself. ViT-B/16
# + multilingual BERT (bert-base-multilingual-cased), trained on the Multi30K images paired with
# the machine translations of their English captions into German, French and Czech (MT(DTD),
# the Cross-lingual Finetune data of multi30k_clft), and evaluated on the human de/fr/cs (and en)
# captions of test_2016_flickr; mAR is the mean over de, fr and cs. CDDS decouples mBERT's word
# tokens of every language against the same patch tokens. Recipe of cdds_vit-bert-b16_flickr30k.py:
# 25 epochs of the 87,000 pairs (1,359 iterations each at batch 64, 453 per language).
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(
    backbone=dict(text='bert-base-multilingual-cased',
                  tokenizer=dict(name_or_path='bert-base-multilingual-cased')),
    languages=['en', 'de', 'fr', 'cs'],
    train_text='target')

target_langs = ['de', 'fr', 'cs']
eval_langs = ['en', 'de', 'fr', 'cs']
# Multi30K's files again, in place of the English-only Flickr30K ones of the base.
train_dataloader = dict(dataset=dict(ann_file='annotations/multi30k_train.json', source_only=False,
                                     target_langs=target_langs))
val_dataloader = dict(dataset=dict(ann_file='annotations/multi30k_val.json', languages=eval_langs))
test_dataloader = dict(dataset=dict(ann_file='annotations/multi30k_test.json',
                                    languages=eval_langs))
# The metric without _delete_: MMEngine applies it only where a dict merges into its base, and
# leaves it in a list's items, where RetrievalMetric would refuse it.
metric = dict(type='RetrievalMetric', languages=eval_langs, source_language='en',
              scoring='tokens')
val_evaluator = dict(metric, _delete_=True)
test_evaluator = [metric, dict(metric, scoring='embedding', prefix='pooled')]
