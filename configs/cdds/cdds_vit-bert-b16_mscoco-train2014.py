# CDDS on ViT-B/16 + BERT, MSCOCO trained on COCO's train2014 images alone (a variant: the paper
# splits MSCOCO 113k / 5k / 5k, Karpathy train + restval, cdds_vit-bert-b16_mscoco.py with its
# 113,287 images; this reads the "82,738 images" once taken from its text as train2014's 82,783,
# Karpathy's 'train' label, written by tools/data/prepare_mscoco.py as coco_train2014.json).
# Validation and test as there (Karpathy 5K val; 5-fold 1K and 5K test). An epoch is one pass over
# train2014's 414,113 captions.
_base_ = ['./cdds_vit-bert-b16_mscoco.py']

train_dataloader = dict(dataset=dict(ann_file='annotations/coco_train2014.json'))
