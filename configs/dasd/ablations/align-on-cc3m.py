# DASD Table 8, CC3M instead of CC300K: the alignment phases read all of Conceptual Captions
# (the images of UC2's translations that the crawl has) instead of its 300k subset. Apply to a
# Zero-shot config (or after align-on-cc300k on a Cross-lingual Finetune one). Prepare with
# tools/data/prepare_cc3m.py without --subset-size, --out data/cc3m/annotations/cc3m_train.json.
cc3m = dict(data_root='data/cc3m', data_prefix=dict(media='images'),
            ann_file='annotations/cc3m_train.json')
train_dataloader = dict(dataset=cc3m)
text_train_dataloader = dict(dataset=cc3m)
