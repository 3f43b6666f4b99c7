# PECTVLM's XTD10 few-shot schedule as the authors' scripts/*.sh run it, instead of the paper's
# Appendix A (40 epochs at batch 10): 50 epochs of the 50 pairs at batch 5, 500 steps, still
# validated every 5 steps. Apply to a pectvlm/*_xtd10-fewshot50_* config.
train_dataloader = dict(batch_size=5)
train_cfg = dict(phases={'0': dict(epochs=50)})
default_hooks = dict(checkpoint=dict(interval=100))
