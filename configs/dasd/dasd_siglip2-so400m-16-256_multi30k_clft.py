# The ViT-SO400M variant of dasd_siglip2-vit-b16-256_multi30k_clft.py: SigLIP 2 SO400M/16 at
# 256 px (open_clip 'ViT-SO400M-16-SigLIP2-256', tag 'webli'; text tower 1152 wide, 27 blocks),
# everything else the same.
_base_ = ['./dasd_siglip2-vit-b16-256_multi30k_clft.py']

siglip_arch = 'ViT-SO400M-16-SigLIP2-256'
siglip_tokenizer = dict(name_or_path='timm/ViT-SO400M-16-SigLIP2-256')
model = dict(backbone=dict(arch=siglip_arch, tokenizer=siglip_tokenizer),
             language_branch=dict(tokenizer=siglip_tokenizer))
media_transform = dict(backbone=siglip_arch)
train_dataloader = dict(dataset=dict(transform=media_transform))
source_finetune_dataloader = dict(dataset=dict(transform=media_transform))
val_dataloader = dict(dataset=dict(transform=media_transform))
test_dataloader = dict(dataset=dict(transform=media_transform))
