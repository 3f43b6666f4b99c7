# DASD's Cross-lingual Finetune setting (DASD Table 1): stage 0, source_finetune, fine-tunes
# CLIP's towers on the dataset's English captions alone (source_finetune_dataloader) for 5 epochs
# at lr 3e-6, then the two phases of dasd_dynamic_phases.py learn the target languages.
# The 5 epochs become iterations when the loop is built (5 x the batches of one pass, per process
# under DDP, logged); each dataset config notes what that gives on the paper's data.
_base_ = ['./dasd_dynamic_phases.py']

train_cfg = dict(phases=[
    dict(name='source_finetune', epochs=5, lr=3e-6, warmup_ratio=0.1, schedule='cosine',
         trainable=['backbone'], loss_weights=dict(source_cm=1.0),
         dataloader='source_finetune_dataloader'),
    *_base_.train_cfg.phases,
])
