# The LoRA twin of cclm_multi30k.py: LoRA on the query and value projections of CCLM's 6 text
# layers, one set per language, with PECTVLM's setting (r = 1, alpha = 16) instead of the
# dynamic adapters; no disentangler; same data, phases and steps, with L_CL then L_CM alone.
_base_ = ['./cclm_multi30k.py',
          '../_base_/models/pectvlm_lora.py']

model = dict(language_branch=dict(adapters=dict(_delete_=True, **_base_.pectvlm_lora)),
             disentangler=None)
