# English CLIP ViT-B/32 (open_clip, OpenAI weights) as an image-text dual encoder whose tokens CDDS
# decouples (cdds_disentangler.py): 50 image tokens (class token + 7 x 7 patches) and up to 77
# word tokens, all through CLIP's final norm and projection (512).
_base_ = ['./cdds_disentangler.py']
model = dict(_base_.cdds_retriever,
             backbone=dict(type='OpenCLIPBackbone', arch='ViT-B-32', pretrained='openai'))
# The paper's CLIP setting with 14 x 14 patches (ViT-B/16: 197 image tokens, width 512) and the
# large tower (ViT-L/14: 16 x 16 patches, 257 tokens, joint width 768, the UNets' too); a leaf
# sets model.backbone to one and its loaders take its images (CLIP's own preprocessing for it).
clip_vit_b16 = dict(arch='ViT-B-16')
clip_vit_b16_images = dict(dataset=dict(
    transform=dict(type='MediaTransform', backbone='ViT-B-16', pretrained='openai')))
clip_vit_l14 = dict(arch='ViT-L-14')
clip_vit_l14_images = dict(dataset=dict(
    transform=dict(type='MediaTransform', backbone='ViT-L-14', pretrained='openai')))
