# CDDS on ViT-B/16 + BERT, MSCOCO trained on COCO's train2014 images alone (the paper's stated
# training set: "82,738 images"; train2014 has 82,783, Karpathy's 'train' label, written by
# tools/data/prepare_mscoco.py as coco_train2014.json) instead of Karpathy train + restval
# (cdds_vit-bert-b16_mscoco.py, 113,287 images). Validation and test as there (Karpathy 5K val;
# 5-fold 1K and 5K test). An epoch is one pass over train2014's 414,113 captions.
_base_ = ['./cdds_vit-bert-b16_mscoco.py']

train_dataloader = dict(dataset=dict(ann_file='annotations/coco_train2014.json'))
