# XTD10 in the Zero-shot setting with both published conventions from one pass over the 1,000
# images (the gallery is encoded once, both metrics read it): M-CLIP's text->image R@10 over all
# 1,000 images (`xtd10_mclip/mean_t2i_R@10`) and PECTVLM's mean of R@1 both ways on the 900 test
# images of the seed-42 split (`xtd10_pectvlm/mean_R@1`). Model selection stays on the 50-image
# val part of that split (../datasets/xtd10_zeroshot.py), keyed on its `mAR`.
# Use this file instead of ../datasets/xtd10_zeroshot.py (it includes it).
_base_ = ['../datasets/xtd10_zeroshot.py']

val_evaluator = dict(type='RetrievalMetric')

test_dataloader = {{_base_.full_test_dataloader}}
test_evaluator = [
    dict(type='RetrievalMetric', protocol='xtd10_t2i_r10', prefix='xtd10_mclip'),
    dict(type='RetrievalMetric', protocol='xtd10_fewshot', prefix='xtd10_pectvlm'),
]
