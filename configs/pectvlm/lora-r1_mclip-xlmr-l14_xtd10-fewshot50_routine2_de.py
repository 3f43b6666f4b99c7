# PECTVLM, XTD10 few-shot (50 images), German, LoRA r = 1 on query/value of M-CLIP's XLM-R:
# routine 2: + lambda * MSE(German caption, the English caption machine-translated into German).
_base_ = ['./_base_/xtd10_fewshot50.py']

model = dict(routine='routine2')
# The alignment partner: each English caption machine-translated into German.
train_dataloader = dict(dataset=dict(translated_texts=['source_to_target']))
train_cfg = dict(phases=[dict(_base_.phase, loss_weights=_base_.align_loss_weights)])
