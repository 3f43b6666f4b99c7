# Evaluation dataloader defaults of the benchmark dataset configs in this folder, and the loops
# evaluating them. A dataset config inherits this file (through loaders.py, or beside
# cc300k_train.py) and MMEngine merges its val_dataloader and test_dataloader into these; its
# other evaluation loaders (zh_val_dataloader, ...) start from them with
# dict(_base_.val_dataloader, ...). A dataset scored in several galleries replaces the loops
# with MultiDatasetValLoop / MultiDatasetTestLoop. Schedules define only the training loop.
val_dataloader = dict(
    batch_size=128, num_workers=8, persistent_workers=True, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='xmr.retrieval_collate'))
test_dataloader = val_dataloader
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
