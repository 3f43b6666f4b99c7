# MSCOCO English retrieval scored as CDDS scores it (paper §3.5): patch-word matching of the
# semantic components on every query x gallery pair, exact on the 5K val split (checkpoint
# selection) and on both test protocols (5-fold 1K, 5K); the cosine of the pooled semantic
# embeddings on the 5K test under coco5k_pooled/.
# Use this file instead of ../datasets/mscoco_en.py (it includes it).
_base_ = ['../datasets/mscoco_en.py']

val_evaluator = dict(_base_.val_evaluator, scoring='tokens')
test_evaluator = [
    dict(val_evaluator, protocol='coco_1k_5fold', prefix='coco1k'),
    dict(val_evaluator, protocol='coco_5k', prefix='coco5k'),
    dict(val_evaluator, protocol='coco_5k', scoring='embedding', prefix='coco5k_pooled'),
]
