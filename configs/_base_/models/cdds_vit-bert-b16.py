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
model = dict(
    _base_.cdds_retriever,
    backbone=dict(type='ViTBERTBackbone', vision='vit_base_patch16_224.orig_in21k',
                  vision_pretrained=True, text='bert-base-uncased', embed_dim=512,
                  tokenizer=dict(type='HFTokenizer', name_or_path='bert-base-uncased',
                                 max_length=64)))
