# Flickr30K English image-text retrieval as CDDS trains and scores it: Karpathy's split
# (29,000 / 1,014 / 1,000 images), all five English captions of each image
# (tools/data/prepare_flickr30k.py writes flickr30k_{train,val,test}.json beside the Multi30K
# annotations, the images in the same folder; tools/data/prepare_laps.py writes the same files
# from LAPS's data/f30k). Training reads every caption (145,000 pairs, as
# LAPS' one-line-per-caption layout does) at CDDS's batch of 64; validation and test score the
# five captions of each image.
_base_ = ['./multi30k_clft.py']

train_dataloader = dict(batch_size=64,
                        dataset=dict(ann_file='annotations/flickr30k_train.json',
                                     source_only=True, target_langs=None))
val_dataloader = dict(dataset=dict(ann_file='annotations/flickr30k_val.json', languages=['en']))
test_dataloader = dict(dataset=dict(ann_file='annotations/flickr30k_test.json',
                                    languages=['en']))
val_evaluator = dict(type='RetrievalMetric', languages=['en'], source_language='en',
                     mean_languages=['en'])
test_evaluator = val_evaluator
