# DASD as the authors' code computes it (HuiGuanLab/DASD), to evaluate their released checkpoints
# converted by tools/convert/dasd_to_xmr.py (docs/methods/dasd.md, "Evaluate the authors'
# released checkpoints"). The Multi30K recipe and data of dasd_clip-vit-b32_multi30k_clft.py with:
#   - CLIP ViT-B/16 with QuickGELU (their expr/*/config.json load ViT-B-16.pt); the weights, CLIP's
#     included, come from the converted checkpoint, so nothing is fetched;
#   - captions padded to 77 mBERT tokens;
#   - one SDM shared by the languages (their parameter generator is), of two frozen blocks
#     without A^sr / A^sa, padding run as tokens and averaged into f^sa, a QuickGELU generator;
#     no discriminator (their two-logit AdvAgent is training-only);
#   - the table's padding row trained as any other (their nn.Embedding has no padding_idx, and
#     f^sa averages the padding in).
_base_ = ['./dasd_clip-vit-b32_multi30k_clft.py']

model = dict(
    backbone=dict(arch='ViT-B-16-quickgelu', pretrained=None),
    language_branch=dict(tokenizer=dict(pad_to=77),
                         embedding=dict(pretrained=None, padding_idx=None)),
    disentangler=dict(per_language=False, depth=2, stream_adapters=False, padding_as_tokens=True,
                      generator=dict(activation='quick_gelu'), use_adversarial=False))
