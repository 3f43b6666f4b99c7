# Multi-MSRVTT, Zero-shot setting: train on CC300K images (English Conceptual Captions with UC2's
# machine translations), never on MSRVTT; evaluated as msrvtt_eval.py says. Training reads the
# same eight target languages the test scores: UC2's translations cover de, fr, cs and zh; attach
# machine translations into ru, vi, sw and es with tools/data/attach_translations.py. Prepare with
# tools/data/prepare_cc3m.py --subset-size 300000 and tools/data/prepare_msrvtt.py.
_base_ = ['./cc300k_train.py', './msrvtt_eval.py']

train_dataloader = dict(dataset=dict(target_langs=_base_.target_langs))
text_train_dataloader = dict(dataset=dict(target_langs=_base_.target_langs))
