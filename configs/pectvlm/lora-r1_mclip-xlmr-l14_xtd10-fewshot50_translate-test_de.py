# PECTVLM, XTD10 few-shot (50 images), German, LoRA r = 1 on query/value of M-CLIP's XLM-R:
# baseline 2 (translate-test): contrastive on the German captions machine-translated into English,
# which are also the test queries (each still encoded with the German module).
_base_ = ['./_base_/xtd10_fewshot50.py']

model = dict(routine='translate_test')
train_cfg = dict(phases=[dict(_base_.phase, loss_weights=dict(cm=1.0))])
