# MLA (AIM3-RUC/MLA) as its authors' code computes it, to evaluate their released checkpoints
# converted by tools/convert/mla_to_xmr.py (docs/methods/dasd.md, "Evaluate the authors' released
# checkpoints"): the Multi30K data and evaluation of the DASD static-adapter ablation with MLA's
# static adapter (hidden 256) after every block, CLIP ViT-B/32 with QuickGELU (their default
# ViT-B-32.pt); every weight, CLIP's included, comes from the converted checkpoint.
_base_ = ['./dasd_clip-vit-b32_multi30k_clft.py']

model = dict(
    backbone=dict(arch='ViT-B-32-quickgelu', pretrained=None),
    language_branch=dict(adapters=dict(_delete_=True, type='StaticAdapter', hidden=256),
                         embedding=dict(pretrained=None)),
    disentangler=None)
paper_figures = dict(source="DASD (Cai et al., AAAI 2025), Table 1: MLA's #TP for five target "
                     'languages (de, fr, cs, zh, ja)', trainable_parameters=108e6)
