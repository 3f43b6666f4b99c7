# Dataloader defaults of the benchmark dataset configs in this folder (all but synthetic.py).
# Each inherits this file and MMEngine merges its train_dataloader, val_dataloader and
# test_dataloader into these, so a dataset config states its datasets and what differs. MMEngine
# merges only keys of the same name: a config's other loaders (text_train_dataloader,
# zh_val_dataloader, ...) start from these defaults with dict(_base_.train_dataloader, ...).
# batch_size is per process (docs/distributed.md); 128 is DASD's batch.
train_dataloader = dict(
    batch_size=128, num_workers=8, persistent_workers=True, drop_last=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='xmr.retrieval_collate'))
val_dataloader = dict(
    batch_size=128, num_workers=8, persistent_workers=True, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='xmr.retrieval_collate'))
test_dataloader = val_dataloader
# The loops evaluating them; a dataset scored in several galleries replaces them with
# MultiDatasetValLoop / MultiDatasetTestLoop. Schedules define only the training loop.
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
