# Training dataloader defaults of the benchmark dataset configs in this folder. A dataset config
# inherits this file (through loaders.py, or beside an evaluation base such as mscoco_eval.py) and
# MMEngine merges its train_dataloader into these. MMEngine merges only keys of the same name: a
# config's other training loaders (text_train_dataloader, source_finetune_dataloader) start from
# these defaults with dict(_base_.train_dataloader, ...).
# batch_size is per process (docs/distributed.md); 128 is DASD's batch.
train_dataloader = dict(
    batch_size=128, num_workers=8, persistent_workers=True, drop_last=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='xmr.retrieval_collate'))
