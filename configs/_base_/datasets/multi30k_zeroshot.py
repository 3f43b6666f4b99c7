# Multi30K, Zero-shot setting: train on CC300K (English Conceptual Captions with UC2's machine
# translations), never on Multi30K; evaluated as multi30k_eval.py says.
# Prepare with tools/data/prepare_cc3m.py --subset-size 300000 and tools/data/prepare_multi30k.py.
_base_ = ['./cc300k_train.py', './multi30k_eval.py']

train_dataloader = dict(dataset=dict(target_langs=_base_.target_langs))
text_train_dataloader = dict(dataset=dict(target_langs=_base_.target_langs))
