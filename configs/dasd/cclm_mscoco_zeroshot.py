# CCLM zero-shot on MSCOCO (DASD Table 3, the "CCLM" row): the test of dasd_cclm_mscoco.py (ja on
# the 1K protocol, mean of five folds; zh on COCO-CN test) with the frozen dual-stream CCLM reading
# every language itself (see cclm_multi30k_zeroshot.py); nothing is trained.
_base_ = ['./dasd_cclm_mscoco.py']

model = dict(language_branch=dict(adapters=None), disentangler=None)

# Nothing trains or validates (the runner builds neither part).
train_dataloader = train_cfg = optim_wrapper = None
val_dataloader = val_cfg = val_evaluator = None
