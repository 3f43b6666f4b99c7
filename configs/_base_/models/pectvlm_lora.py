# PECTVLM's LoRA setting (docs/methods/pectvlm.md): r = 1, alpha = 16 on the query and value
# projections of every text block, one set per target language; A Kaiming-initialised, B zero,
# so a language starts as the frozen tower. Model configs place it as a branch's adapters.
pectvlm_lora = dict(type='LoRA', r=1, alpha=16, targets=['q', 'v'])
