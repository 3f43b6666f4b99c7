# English CLIP ViT-B/32 (frozen) + an MLA static adapter after every text block, one set per
# target language; mBERT-sized embedding block (119,547 x 768 -> W_e -> CLIP positions).
target_languages = ['de', 'fr', 'cs', 'zh', 'ja']
model = dict(
    type='CrossLingualRetriever',
    backbone=dict(type='OpenCLIPBackbone', arch='ViT-B-32', pretrained='openai'),
    language_branch=dict(
        type='TargetLanguageBranch',
        languages=target_languages,
        tokenizer=dict(type='HFTokenizer', name_or_path='bert-base-multilingual-cased',
                       max_length=77),
        embedding=dict(type='TargetEmbedding', table_width=768,
                       pretrained='bert-base-multilingual-cased'),
        adapters=dict(type='StaticAdapter', hidden=256)),
    losses=dict(cl=dict(type='AlignmentLoss', kind='mse'),
                cm=dict(type='InfoNCELoss', temperature=0.01)),
)
