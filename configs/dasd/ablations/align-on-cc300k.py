# DASD Table 1, Cross-lingual Finetune with CC300K target data: the alignment phases
# (cross_lingual, cross_modal) read CC300K's English captions with UC2's machine translations
# instead of the benchmark's MT(DTD) pairs; a source finetune (stage 0) still reads the
# benchmark's English captions, and the benchmark's evaluation is unchanged. On a Zero-shot
# config this is what it trains on already. Prepare with tools/data/prepare_cc3m.py
# --subset-size 300000 (docs/data.md).
cc300k = dict(data_root='data/cc3m', data_prefix=dict(media='images'),
              ann_file='annotations/cc300k_train.json')
train_dataloader = dict(dataset=cc300k)
text_train_dataloader = dict(dataset=cc300k)
