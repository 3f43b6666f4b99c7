# PECTVLM's full-data Multi30K schedule as run_choose_pet_task1.py's defaults give it, instead of
# the paper's Appendix A (15 epochs at batch 48): 50 epochs at batch 4, validated once per epoch
# (7,250 iterations at batch 4; 362,500 in all). Apply to a pectvlm/*_multi30k-full_* config.
train_dataloader = dict(batch_size=4)
train_cfg = dict(val_interval=dict(_delete_=True, epochs=1), phases={'0': dict(epochs=50)})
