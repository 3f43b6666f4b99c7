# English CLIP ViT-B/32 (open_clip, OpenAI weights) as an image-text dual encoder whose tokens CDDS
# decouples (cdds_disentangler.py): 50 image tokens (class token + 7 x 7 patches) and up to 77
# word tokens, all through CLIP's final norm and projection (512).
_base_ = ['./cdds_disentangler.py']
model = dict(_base_.cdds_retriever,
             backbone=dict(type='OpenCLIPBackbone', arch='ViT-B-32', pretrained='openai'))
