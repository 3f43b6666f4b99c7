# PECTVLM, XTD10 few-shot (50 images), German, LoRA r = 1 on query/value of M-CLIP's XLM-R:
# baseline 1: image-text contrastive on the German captions only, queried with them.
_base_ = ['./_base_/xtd10_fewshot50.py']

model = dict(routine='target_only')
train_cfg = dict(phases=[dict(_base_.phase, loss_weights=dict(cm=1.0))])
