# DASD Table 1, Zero-shot trained on MT(MSCOCO): the alignment phases read MSCOCO's Karpathy
# train captions with their machine translations into the config's target languages instead of
# CC300K (on the Multi30K Zero-shot config: trained on MT(MSCOCO), tested on Multi30K). Prepare
# with tools/data/prepare_mscoco.py, then attach the translations (de=..., fr=..., cs=...) with
# tools/data/attach_translations.py.
mscoco_mt = dict(data_root='data/mscoco', data_prefix=dict(media='images'),
                 ann_file='annotations/coco_train.json')
train_dataloader = dict(dataset=mscoco_mt)
text_train_dataloader = dict(dataset=mscoco_mt)
