# CCLM zero-shot on Multi30K (DASD Table 3, the "CCLM" row): the test of cclm_multi30k.py with the
# frozen dual-stream CCLM reading every language itself; nothing is trained. Each target language
# goes through a branch with CCLM's own embeddings and no adapter, which is CCLM's text encoder
# unchanged, so English and the target languages are scored by the same model. Evaluate with the
# runner's test loop (load_run_config adds the work_dir the config does not set), e.g.
#   Runner.from_cfg(load_run_config('configs/dasd/cclm_multi30k_zeroshot.py')).test()
_base_ = ['./cclm_multi30k.py']

model = dict(language_branch=dict(adapters=None), disentangler=None)

# Nothing trains or validates (the runner builds neither part).
train_dataloader = train_cfg = optim_wrapper = None
val_dataloader = val_cfg = val_evaluator = None
