# Zero-shot M-CLIP with PECTVLM's best English prompt: "a photo of" written after <s> of every
# caption, in every language (frozen: exactly as if the caption began with those words).
_base_ = ['./_base_/xtd10_zeroshot_test.py']

model = dict(language_branch=dict(
    adapters=dict(_delete_=True, type='HardPrompt', text='a photo of')))
