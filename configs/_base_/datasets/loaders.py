# Dataloader defaults of a dataset config that trains and evaluates on one benchmark: the training
# defaults and the evaluation defaults with their loops. A config that trains on one dataset and
# evaluates on another lists the two parts itself (the zero-shot configs: cc300k_train.py, which
# inherits train_loaders.py, beside eval_loaders.py or an evaluation base).
_base_ = ['./train_loaders.py', './eval_loaders.py']
