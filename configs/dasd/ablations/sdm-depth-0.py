# DASD Figure 4: the semantics disentangling module with depth k = 0 (the paper's k = 1):
# no frozen block: A^sr and A^sa act on the embeddings directly (the paper's two MLPs at depth 0).
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(disentangler=dict(depth=0))
