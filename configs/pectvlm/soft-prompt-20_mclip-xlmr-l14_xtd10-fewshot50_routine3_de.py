# PECTVLM's soft prompt of 20 random tokens: the soft prompt of
# soft-prompt_mclip-xlmr-l14_xtd10-fewshot50_routine3_de.py with 20 vectors N(0, 0.02), not 4.
# (The 3-token prompt initialised from "a photo of" is the trainable hard prompt of
# hard-prompt_mclip-xlmr-l14_xtd10-fewshot50_routine3_de.py.)
_base_ = ['./soft-prompt_mclip-xlmr-l14_xtd10-fewshot50_routine3_de.py']

model = dict(language_branch=dict(adapters=dict(num_tokens=20)))
