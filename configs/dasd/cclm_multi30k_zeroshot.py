# CCLM zero-shot on Multi30K (DASD Table 3, the "CCLM" row): the frozen dual-stream CCLM reads
# every language itself; nothing is trained. Each target language goes through a branch with
# CCLM's own embeddings and no adapter, which is CCLM's text encoder unchanged, so English and
# the target languages are scored by the same model. Evaluate with the runner's test loop, e.g.
#   Runner.from_cfg(Config.fromfile('configs/dasd/cclm_multi30k_zeroshot.py')).test()
_base_ = [
    '../_base_/models/dasd_cclm.py',
    '../_base_/datasets/multi30k_clft.py',
    '../_base_/default_runtime.py',
]

model = dict(
    language_branch=dict(languages={{_base_.target_langs}}, adapters=None),
    disentangler=None)


# Only evaluation runs: the training loaders of the dataset config are dropped.
train_dataloader = None
text_train_dataloader = None
source_finetune_dataloader = None
val_dataloader = None
val_cfg = None
test_dataloader = dict(dataset=dict(transform=dict(_delete_=True,
                                                   **_base_.cclm_media_transform)))
test_evaluator = dict(type='RetrievalMetric', languages={{_base_.eval_langs}},
                      source_language='en')
test_cfg = dict(type='TestLoop')
