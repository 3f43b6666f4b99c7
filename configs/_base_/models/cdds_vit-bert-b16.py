# CDDS's own towers: ViT-B/16 (timm 'orig_in21k', the weights of google/vit-base-patch16-224-in21k
# that LAPS loads) and bert-base-uncased, each followed by a linear map to 512; the CDDS UNets on
# their tokens (197 image tokens: CLS + 14 x 14 patches; BERT's word pieces with [CLS]/[SEP]).
# Both towers train with the UNets (at 0.1 x the learning rate, as in LAPS); the UNets, objective
# and retrieval of cdds_disentangler.py.
_base_ = ['./cdds_disentangler.py']
# ViT-B/16's images: 224 px, shortest side, bicubic, centre crop; normalisation comes from the
# backbone (timm's statistics). A leaf puts it in its loaders in place of the dataset's CLIP one.
vit_media_transform = dict(type='MediaTransform', backbone=None, size=224,
                           resize_mode='shortest', interpolation='bicubic')
# The paper's other image towers (a leaf sets model.backbone to one; at 384 px its loaders take
# images_384): ViT-B/16 at 384 px (24 x 24 patches + CLS; timm's Google weights, in21k
# fine-tuned on in1k at 384), Swin-B at 224 px (the final 7 x 7 patches, width 1024; the weights
# of microsoft/swin-base-patch4-window7-224 that LAPS loads) and at 384 px (12 x 12, window 12).
vit_b16_384_tower = dict(vision='vit_base_patch16_384.orig_in21k_ft_in1k')
swin_b_tower = dict(vision='swin_base_patch4_window7_224.ms_in22k_ft_in1k')
swin_b_384_tower = dict(vision='swin_base_patch4_window12_384.ms_in22k_ft_in1k')
images_384 = dict(dataset=dict(transform=dict(vit_media_transform, _delete_=True, size=384)))
model = dict(
    _base_.cdds_retriever,
    backbone=dict(type='ViTBERTBackbone', vision='vit_base_patch16_224.orig_in21k',
                  vision_pretrained=True, text='bert-base-uncased', embed_dim=512,
                  tokenizer=dict(type='HFTokenizer', name_or_path='bert-base-uncased',
                                 max_length=64)))
