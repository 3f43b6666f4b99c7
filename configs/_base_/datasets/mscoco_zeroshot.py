# MSCOCO, Zero-shot setting: train on CC300K (English Conceptual Captions with UC2's machine
# translations into ja and zh), never on COCO; evaluated as mscoco_eval.py says. Prepare with
# tools/data/prepare_cc3m.py --subset-size 300000 and tools/data/prepare_mscoco.py.
_base_ = ['./cc300k_train.py', './mscoco_eval.py']

train_dataloader = dict(dataset=dict(target_langs=_base_.target_langs))
text_train_dataloader = dict(dataset=dict(target_langs=_base_.target_langs))
