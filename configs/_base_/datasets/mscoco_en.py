# MSCOCO English image-text retrieval as CDDS trains and scores it: the Karpathy train + restval
# English captions (113,287 images, 566,747 captions) at CDDS's batch of 64, model selection on
# the 5K val split, test on the 5K test split under both COCO protocols (5-fold 1K, mean over
# folds; and 5K). tools/data/prepare_mscoco.py writes the files, or tools/data/prepare_laps.py
# from LAPS's data/coco (whose val split is Karpathy val's first 1,000 images: docs/data.md).
_base_ = ['./mscoco_clft.py']

train_dataloader = dict(batch_size=64,
                        dataset=dict(source_only=True, target_langs=None))
# One English gallery each (the COCO loaders of mscoco_eval.py), in place of the two galleries
# of its ja/zh evaluation.
val_dataloader = dict(_base_.coco_val_dataloader, _delete_=True,
                      dataset=dict(_base_.coco_val_dataloader.dataset, languages=['en']))
test_dataloader = dict(_base_.coco_test_dataloader, _delete_=True,
                       dataset=dict(_base_.coco_test_dataloader.dataset, languages=['en']))
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
# The metric without _delete_, which MMEngine leaves in a list's items (see test_evaluator).
en_metric = dict(type='RetrievalMetric', languages=['en'], source_language='en',
                 mean_languages=['en'])
val_evaluator = dict(en_metric, _delete_=True)
test_evaluator = [
    dict(en_metric, protocol='coco_1k_5fold', prefix='coco1k'),
    dict(en_metric, protocol='coco_5k', prefix='coco5k'),
]
