# PECTVLM's full-data Multi30K schedule as run_choose_pet_task1.py's defaults give it, instead of
# the paper's Appendix A (15 epochs at batch 48): 50 epochs at batch 4 (7,250 iterations an
# epoch; 362,500 in all), validated every 4 iterations (--eval_steps 4: trainer.py validates at
# every multiple of it and nowhere else, so 90,625 validations on the 1,014 val images choose
# the best). Apply to a pectvlm/*_multi30k-full_* config.
train_dataloader = dict(batch_size=4)
train_cfg = dict(val_interval=4, phases={'0': dict(epochs=50)})
