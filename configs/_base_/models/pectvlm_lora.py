# PECTVLM's LoRA setting (docs/methods/pectvlm.md): r = 1, alpha = 16 on the query and value
# projections of every text block, one set per target language; A Kaiming-initialised, B zero,
# so a language starts as the frozen tower. `pectvlm_branch` places it in a target branch that
# reads the multilingual tower's own frozen token table (TowerTokenEmbedding: no new table, a
# language's LoRA is all it adds); a model config completes it with its languages and the
# tower's tokenizer.
pectvlm_lora = dict(type='LoRA', r=1, alpha=16, targets=['q', 'v'])
pectvlm_branch = dict(type='TargetLanguageBranch', embedding=dict(type='TowerTokenEmbedding'),
                      adapters=pectvlm_lora)
