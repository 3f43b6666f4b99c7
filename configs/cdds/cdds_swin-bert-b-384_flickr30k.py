# CDDS on Swin-B at 384 px + BERT, Flickr30K: cdds_vit-bert-b16_flickr30k.py with the paper's
# Swin-384 setting: the final 12 x 12 patches of Swin-B (window 12) at 384 px, mapped to 512.
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(backbone=dict(vision='swin_base_patch4_window12_384.ms_in22k_ft_in1k'))
_image_transform = dict(_delete_=True, type='MediaTransform', backbone=None, size=384,
                       resize_mode='shortest', interpolation='bicubic')
train_dataloader = dict(dataset=dict(transform=_image_transform))
val_dataloader = dict(dataset=dict(transform=_image_transform))
test_dataloader = dict(dataset=dict(transform=_image_transform))
