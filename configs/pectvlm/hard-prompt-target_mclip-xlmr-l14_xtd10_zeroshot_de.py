# Zero-shot M-CLIP with the prompt in the target language: German captions prefixed with
# "ein Foto von" (frozen). One config per prompt language: the adapter config holds one text.
_base_ = ['./_base_/xtd10_zeroshot_test.py']

model = dict(language_branch=dict(languages=['de'],
                                  adapters=dict(_delete_=True, type='HardPrompt',
                                                text='ein Foto von')))
# The gallery reads the languages the model has modules for: English and German.
test_dataloader = dict(dataset=dict(languages=['en', 'de']))
test_evaluator = dict(languages=['en', 'de'], mean_languages=['de'])
