# DASD's released optimiser in place of the paper's Adam (docs/methods/dasd.md, row 21): BertAdam
# (no bias correction, each tensor's gradient clipped to norm 1 on its own), no clip of the
# global norm (the fp16 path of every released config has none), and BERT's warmup_cosine in
# every phase (the cosine over the whole phase, warm-up included). The learning rates, betas,
# eps and weight decay are the config's.
optim_wrapper = dict(optimizer=dict(type='BertAdam', max_grad_norm=1.0), clip_grad=None)
train_cfg = dict(phases={'*': dict(schedule='bert_cosine')})
