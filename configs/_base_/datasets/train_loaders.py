# Training dataloader defaults of the benchmark dataset configs in this folder. A dataset config
# inherits this file (alone, or beside an evaluation part: multi30k_eval.py, eval_loaders.py) and
# merges its caption dataset into each loader it offers: train_dataloader (media + caption pairs),
# text_train_dataloader (text-only pairs, for phases that never look at the media: cross-lingual
# alignment) and source_finetune_dataloader (English captions alone, for the source finetune of
# CL-FT stage 0); a loader its data cannot give is set to None.
# batch_size is per process (docs/distributed.md); 128 is DASD's batch. Each batch holds one
# language, as the DASD and MLA authors batch (a loader per language): LanguageBatchSampler, which
# drops each language's incomplete last batch of a pass (so no drop_last here; torch refuses it
# beside a batch sampler). batch_sampler=dict(type='GlobalBatchSampler') mixes the languages in
# a batch, cut as global batches under DDP (docs/distributed.md).
train_dataloader = dict(
    batch_size=128, num_workers=8, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    batch_sampler=dict(type='LanguageBatchSampler'),
    collate_fn=dict(type='xmr.retrieval_collate'))
text_train_dataloader = dict(train_dataloader, num_workers=2, dataset=dict(with_media=False))
source_finetune_dataloader = dict(train_dataloader, dataset=dict(source_only=True))
