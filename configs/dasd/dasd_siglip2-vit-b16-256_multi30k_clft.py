# DASD on SigLIP 2 ViT-B/16-256, Multi30K, Cross-lingual Finetune setting: the recipe of
# dasd_clip-vit-b32_multi30k_clft.py (source finetune, then cross_lingual and cross_modal with
# DASD's losses) on the model of ../_base_/models/dasd_siglip2-vit-b16-256.py, whose own sigmoid
# loss scores image-caption pairs. Media follow SigLIP 2's preprocessing (256 px, mean/std 0.5).
_base_ = [
    '../_base_/models/dasd_siglip2-vit-b16-256.py',
    '../_base_/datasets/multi30k_clft.py',
    '../_base_/schedules/dasd_clft_phases.py',
    '../_base_/default_runtime.py',
]

model = dict(language_branch=dict(languages={{_base_.target_langs}}))

media_transform = dict(type='MediaTransform', backbone={{_base_.siglip_arch}}, pretrained='webli')
train_dataloader = dict(dataset=dict(transform=media_transform))
source_finetune_dataloader = dict(dataset=dict(transform=media_transform))
val_dataloader = dict(dataset=dict(transform=media_transform))
test_dataloader = dict(dataset=dict(transform=media_transform))
