# Zero-shot translate-test: M-CLIP queried with every language's captions machine-translated into
# English (PECTVLM's translated_to_en files attached as back-translations).
_base_ = ['./_base_/xtd10_zeroshot_test.py']

model = dict(routine='translate_test')
test_dataloader = dict(dataset=dict(back_translated_languages=_base_.target_langs))
