# English CLIP ViT-B/32 (frozen) + an MLA static adapter after every text block, one set per
# target language; mBERT-sized embedding block (119,547 x 768 -> W_e -> CLIP positions).
# The 'openai' tag's record applies (QuickGELU, OpenAI's mean/std). With OpenAI's file instead:
# pretrained='pretrained_model/clip/ViT-B-32.pt', pretrained_cfg='openai'; the table loads from
# mBERT's pytorch_model.bin / model.safetensors (or its folder) the same way
# (docs/pretrained_weights.md).
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
