# PECTVLM, XTD10 few-shot (50 images), German, LoRA r = 1 on query/value of M-CLIP's XLM-R:
# routine 1: + lambda * MSE(German caption, its original English caption); German queries.
_base_ = ['./_base_/xtd10_fewshot50.py']

model = dict(routine='routine1')
train_cfg = dict(phases=[dict(_base_.phase, loss_weights=_base_.align_loss_weights)])
