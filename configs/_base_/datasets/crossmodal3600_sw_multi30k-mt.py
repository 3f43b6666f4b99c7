# Swahili learnt from the English Multi30K training captions machine-translated into Swahili
# (tools/data/attach_translations.py annotations/multi30k_train.json --translations sw=sw.txt
# --out annotations/multi30k_train_sw.json writes them beside the Multi30K files; docs/data.md),
# tested on Crossmodal-3600 in English and Swahili with both of its protocols
# (every caption, and CLIP_benchmark's first caption, which `tools/test.py --format
# clip_benchmark` exports). XM3600 has no validation split: a run validates nothing and keeps its
# last checkpoint (the leaf sets train_cfg.val_interval=0 and no save_best). A leaf on another
# backbone merges its media transform into both loaders.
_base_ = ['./crossmodal3600.py', './train_loaders.py']
train_captions = dict(type='CaptionPairDataset', data_root='data/multi30k',
                      data_prefix=dict(media='flickr30k-images'),
                      ann_file='annotations/multi30k_train_sw.json', target_langs=['sw'],
                      transform=_base_.media_transform)

train_dataloader = dict(dataset=train_captions)
text_train_dataloader = dict(dataset=train_captions)
source_finetune_dataloader = None
test_dataloader = dict(dataset=dict(languages=['en', 'sw']))
val_dataloader = None
val_cfg = None
