# Zero-shot M-CLIP with PECTVLM's best English prompt: "a photo of" written after <s> of every
# caption, in every language (frozen: exactly as if the caption began with those words).
_base_ = ['./_base_/xtd10_zeroshot_test.py']

prompt = 'a photo of'
# The English captions are read after the prompt too, as the paper evaluates English.
model = dict(language_branch=dict(adapters=dict(_delete_=True, type='HardPrompt', text=prompt)),
             data_preprocessor=dict(source_prompt=prompt))
