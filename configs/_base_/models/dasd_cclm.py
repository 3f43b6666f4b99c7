# CCLM (Cross-View Language Modeling, ACL 2023) as a frozen dual-stream model + DASD (DASD Table 3,
# "CCLM + DASD"): Swin-B image tower at 384 px (window 12, bias tables resampled from the 224 px
# pre-training checkpoint as CCLM's own loader does) and the 6 text-only XLM-R-config layers,
# r = text_proj / vision_proj (256-d). The target branch reads the multilingual XLM-R tokens with
# CCLM's own frozen embeddings (TowerTokenEmbedding: CCLM already has a table for every target
# language) and a dynamic adapter after each of the 6 text layers (W_down 1024->32, W_up 32->1024);
# the semantics disentangling module runs the first layer with A^sr / A^sa (hidden 256),
# f^sr = W_p^sr LN(x_CLS) (256-d), f^sa (1024-d), generator d_z 512, d_u 32 (dasd_sdm.py).
#
# The checkpoint is not downloadable from these configs: fetch CCLM (4M) from the authors' README
# (docs/methods/cclm.md) and point cclm_checkpoint at it, or override it on the command line with
# --cfg-options model.backbone.checkpoint=PATH. A missing file stops the build naming the path.
_base_ = ['./dasd_sdm.py']
cclm_checkpoint = 'checkpoints/cclm_4m.th'
# XLM-R's SentencePiece tokenizer with CCLM's caption cleaning; offline, download the hub
# repository xlm-roberta-large's tokenizer.json once and use
# dict(type='CCLMTokenizer', tokenizer_file='checkpoints/xlm-roberta-large/tokenizer.json').
xlmr_tokenizer = dict(type='CCLMTokenizer', name_or_path='xlm-roberta-large', max_length=40)
target_languages = ['de', 'fr', 'cs', 'zh', 'ja']
model = dict(
    type='CrossLingualRetriever',
    backbone=dict(type='CCLMDualStream', checkpoint=cclm_checkpoint, image_size=384,
                  bias_interpolation='geometric', tokenizer=xlmr_tokenizer),
    language_branch=dict(
        type='TargetLanguageBranch',
        languages=target_languages,
        tokenizer=xlmr_tokenizer,
        embedding=dict(type='TowerTokenEmbedding'),
        adapters=_base_.dasd_adapters),
    disentangler=_base_.dasd_disentangler,
    # CCLM's own contrastive temperature for the image-text InfoNCE: the `temp` its checkpoint
    # holds (backbone.temperature), which CCLM learns in pre-training from its configs' 0.07.
    losses=dict(cl=dict(type='AlignmentLoss', kind='mse'),
                cm=dict(type='InfoNCELoss', temperature=None)),
)
# CCLM's image preprocessing: bicubic resize of the whole image to 384 x 384 (no crop).
cclm_media_transform = dict(type='MediaTransform', backbone=None, size=384, resize_mode='squash',
                            interpolation='bicubic')
