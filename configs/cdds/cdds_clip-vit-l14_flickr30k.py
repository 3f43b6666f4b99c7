# CDDS on CLIP ViT-L/14 (OpenAI weights), Flickr30K: cdds_clip-vit-b32_flickr30k.py with the large
# tower: 16 x 16 patches at 224 px (257 image tokens), joint width 768 (the UNets' too), and
# CLIP's own preprocessing for it.
_base_ = ['./cdds_clip-vit-b32_flickr30k.py']

model = dict(backbone=dict(arch='ViT-L-14'))
_image_transform = dict(type='MediaTransform', backbone='ViT-L-14',
                        pretrained='openai')
train_dataloader = dict(dataset=dict(transform=_image_transform))
val_dataloader = dict(dataset=dict(transform=_image_transform))
test_dataloader = dict(dataset=dict(transform=_image_transform))
