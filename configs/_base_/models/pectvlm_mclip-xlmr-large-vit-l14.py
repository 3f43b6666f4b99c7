# PECTVLM's model (docs/methods/pectvlm.md): Multilingual-CLIP XLM-Roberta-Large-Vit-L-14, i.e.
# the XLM-R large text encoder (masked mean pooling, Linear 1024 -> 768) with OpenAI's CLIP
# ViT-L/14 image tower, both frozen, logit scale fixed at 100, plus one PEFT module per target
# language inside the XLM-R layers: LoRA r = 1, alpha = 16 on query and value by default (A
# Kaiming, B zero). The branch reads XLM-R's own (frozen) token embeddings, so a language's
# module is all it adds. The routine (docs/methods/pectvlm.md) is chosen by the leaf config.
#
# Offline: put the M-CLIP release (config.json, pytorch_model.bin or model.safetensors and the
# tokenizer files of the hub repo M-CLIP/XLM-Roberta-Large-Vit-L-14) under mclip_dir; the XLM-R
# architecture is xlm-roberta-large's (xmr.models.backbones.mclip.XLMR_LARGE). OpenAI's ViT-L/14
# weights come through open_clip's cache ('openai' tag) or OpenAI's ViT-L-14.pt in
# image_pretrained with image_pretrained_cfg='openai' (docs/pretrained_weights.md).
_base_ = ['./pectvlm_lora.py']
# Tower weights a setting gives each language its own trainable copy of (TowerWeights), named as
# in MultilingualCLIPTextTower: both LayerNorms of every XLM-R layer (OpenDelta's
# 'output.LayerNorm' matches 'attention.output.LayerNorm' too) and M-CLIP's linear head.
mclip_layer_norms = ['layers.*.output.LayerNorm.*']
mclip_head = ['text_proj.*']
mclip_dir = 'checkpoints/M-CLIP-XLM-Roberta-Large-Vit-L-14'
xlmr_tokenizer = dict(type='HFTokenizer', name_or_path=mclip_dir, max_length=512)
target_languages = ['de']
model = dict(
    type='TranslationAlignmentRetriever',
    routine='target_only',
    english_encoder='branch',
    backbone=dict(type='MultilingualCLIPBackbone', embed_dim=768, checkpoint=mclip_dir,
                  image_arch='ViT-L-14', image_pretrained='openai', tokenizer=xlmr_tokenizer),
    language_branch=dict(_base_.pectvlm_branch, languages=target_languages,
                         tokenizer=xlmr_tokenizer),
    losses=dict(cm=dict(type='InfoNCELoss', temperature=0.01),
                align=dict(type='TranslationAlignmentLoss', kind='mse')),
)
