# Flickr30K English retrieval scored as CDDS scores it (paper §3.5): patch-word matching of the
# semantic components on every query x gallery pair (the model's retrieval_score='patch_word'),
# bare keys, which select the best checkpoint; the test adds the cosine of the pooled semantic
# embeddings under pooled/. Re-ranking for large galleries: scoring='tokens_rerank' with
# rerank_candidates (docs/methods/cdds.md).
# Use this file instead of ../datasets/flickr30k_en.py (it includes it).
_base_ = ['../datasets/flickr30k_en.py']

val_evaluator = dict(_base_.val_evaluator, scoring='tokens')
test_evaluator = [val_evaluator, dict(val_evaluator, scoring='embedding', prefix='pooled')]
