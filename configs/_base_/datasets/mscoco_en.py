# MSCOCO English image-text retrieval as CDDS trains and scores it: the Karpathy train + restval
# English captions (113,287 images, 566,747 captions) at CDDS's batch of 64, model selection on
# the 5K val split, test on the 5K test split under both COCO protocols (5-fold 1K, mean over
# folds; and 5K).
_base_ = ['./mscoco_clft.py']
batch_size = 64
train_pairs = 566747
epoch = train_pairs // batch_size

train_dataloader = dict(batch_size=batch_size,
                        dataset=dict(source_only=True, target_langs=None))
val_dataloader = dict(dataset=dict(languages=['en']))
test_dataloader = dict(dataset=dict(languages=['en']))
val_evaluator = dict(type='RetrievalMetric', languages=['en'], source_language='en',
                     mean_languages=['en'])
test_evaluator = [
    dict(val_evaluator, protocol='coco_1k_5fold', prefix='coco1k'),
    dict(val_evaluator, protocol='coco_5k', prefix='coco5k'),
]
