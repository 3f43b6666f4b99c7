# DASD Figure 4: the semantics disentangling module with depth k = 10 (the paper's k = 1):
# the first 10 frozen CLIP text blocks, each followed by A^sr (resp. A^sa).
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(disentangler=dict(depth=10))
