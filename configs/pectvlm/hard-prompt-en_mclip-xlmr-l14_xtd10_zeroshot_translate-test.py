# Zero-shot "English hard prompt + MT", PECTVLM's zero-shot result: every caption machine-
# translated into English and queried after PECTVLM's best English prompt, "a photo of" (the
# translate-test of mclip-xlmr-l14_xtd10_zeroshot_translate-test.py with the frozen prompt).
_base_ = ['./mclip-xlmr-l14_xtd10_zeroshot_translate-test.py']

prompt = 'a photo of'
# The English captions are read after the prompt too, as the paper evaluates English.
model = dict(language_branch=dict(adapters=dict(_delete_=True, type='HardPrompt', text=prompt)),
             data_preprocessor=dict(source_prompt=prompt))
