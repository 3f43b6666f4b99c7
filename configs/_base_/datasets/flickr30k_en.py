# Flickr30K English image-text retrieval as CDDS trains and scores it, read through xmr's Multi30K
# annotations (docs/data.md): the Flickr30K images in the 29,000 / 1,014 / 1,000 split. Training
# reads the one English caption per image of Multi30K task 1 (the paper trains on all five
# Flickr30K captions: a five-caption annotation file in the same schema drops in as ann_file) at
# CDDS's batch of 64; the test reads the five original English captions of each test image
# (multi30k_test_5captions.json, task 2).
_base_ = ['./multi30k_clft.py']
batch_size = 64
train_pairs = 29000
epoch = train_pairs // batch_size

train_dataloader = dict(batch_size=batch_size,
                        dataset=dict(source_only=True, target_langs=None))
val_dataloader = dict(dataset=dict(languages=['en']))
test_dataloader = dict(dataset=dict(ann_file='annotations/multi30k_test_5captions.json',
                                    languages=['en']))
val_evaluator = dict(type='RetrievalMetric', languages=['en'], source_language='en',
                     mean_languages=['en'])
test_evaluator = val_evaluator
