# PECTVLM, XTD10 few-shot (50 images), routine 3, for Japanese: the pattern for any XTD10
# language (es, it, ja, ko, pl, ru, tr, zh, fr, de). PECTVLM trains each language on its own;
# set `language` and repeat these language fields.
_base_ = ['./lora-r1_mclip-xlmr-l14_xtd10-fewshot50_routine3_de.py']
language = 'ja'

model = dict(language_branch=dict(languages=[language]))
train_dataloader = dict(dataset=dict(target_langs=[language]))
val_dataloader = dict(dataset=dict(languages=['en', language],
                                   back_translated_languages=[language]))
test_dataloader = val_dataloader
val_evaluator = dict(languages=['en', language], mean_languages=[language])
test_evaluator = val_evaluator
