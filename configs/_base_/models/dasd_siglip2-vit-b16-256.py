# SigLIP 2 ViT-B/16 at 256 px (open_clip 'ViT-B-16-SigLIP2-256', tag 'webli'), frozen, + DASD
# (docs/methods/dasd.md, docs/backbones.md). Its text tower is bidirectional and pools the last
# of a fixed 64-token context; Gemma's multilingual tokenizer (256k ids, the model's own) already
# reads every target language, so the branch embeds with the tower's own frozen table
# (TowerTokenEmbedding, as CCLM + DASD does) and pads each caption to the context itself. DASD's
# dynamic adapters (768 -> 32 -> 768) follow every text block; the SDM of dasd_sdm.py reads the
# first. The cross-modal phase trains with SigLIP's own sigmoid loss on the model's frozen
# logit scale and bias (SigmoidLoss); L_CL stays DASD's MSE.
_base_ = ['./dasd_sdm.py']
siglip_arch = 'ViT-B-16-SigLIP2-256'
siglip_tokenizer = dict(type='HFTokenizer', name_or_path='timm/ViT-B-16-SigLIP2-256',
                        clean='canonicalize', max_length=64)
target_languages = ['de', 'fr', 'cs']
model = dict(
    type='CrossLingualRetriever',
    backbone=dict(type='OpenCLIPBackbone', arch=siglip_arch, pretrained='webli',
                  tokenizer=siglip_tokenizer),
    language_branch=dict(
        type='TargetLanguageBranch',
        languages=target_languages,
        tokenizer=siglip_tokenizer,
        embedding=dict(type='TowerTokenEmbedding'),
        adapters=_base_.dasd_adapters),
    disentangler=_base_.dasd_disentangler,
    losses=dict(source_cm=dict(type='SigmoidLoss'),
                cl=dict(type='AlignmentLoss', kind='mse'),
                cm=dict(type='SigmoidLoss')),
)
