# PECTVLM, XTD10 few-shot (50 images), German, LoRA r = 1 on query/value of M-CLIP's XLM-R:
# routine 3: contrastive on German->English MT + lambda * MSE(that MT, the original English);
# the MT into English is the query at test time too.
_base_ = ['./_base_/xtd10_fewshot50.py']

model = dict(routine='routine3')
# The query, in training and evaluation alike: each German caption machine-translated into
# English (back-translations attached to every split).
train_dataloader = dict(dataset=dict(translated_texts=['target_to_source']))
val_dataloader = dict(dataset=dict(back_translated_languages=[_base_.language]))
test_dataloader = val_dataloader
train_cfg = dict(phases=[dict(_base_.phase, loss_weights=_base_.align_loss_weights)])
