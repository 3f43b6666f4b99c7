# English CLIP ViT-B/32 (frozen) + DASD (docs/methods/dasd.md): the mBERT-sized embedding block
# (119,547 x 768 -> W_e -> CLIP positions), a dynamic adapter after every text block
# (W_down 512->32, W_up 32->512, one set per target language), and the semantics disentangling
# module shared by all languages: the first k=1 frozen CLIP block with bottleneck adapters
# A^sr / A^sa (hidden 256), f^sr = W_p^sr LN(x_EOS), f^sa = mean of LN(x_t) over the real tokens,
# the parameter generator z = MLP([f^sr; f^sa]) (d_z 512), W_i^z = reshape(W_i^down z) (d_u 32),
# L_sc = L1(f^sr, r^S), and the pair discriminator (1024 -> 256 -> 128 -> 1, Tanh) behind
# gradient reversal for L_adv.
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
        adapters=dict(type='DynamicAdapter', hidden=32)),
    disentangler=dict(
        type='SemanticsDisentangler',
        depth=1,
        adapter=dict(type='StaticAdapter', hidden=256),
        features=['sr', 'sa'],
        generator=dict(d_z=512, d_u=32),
        consistency_loss=dict(type='AlignmentLoss', kind='l1'),
        discriminator=dict(hidden=(256, 128))),
    losses=dict(cl=dict(type='AlignmentLoss', kind='mse'),
                cm=dict(type='InfoNCELoss', temperature=0.01)),
)
