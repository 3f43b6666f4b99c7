# DASD Table 10: no dynamic adapter after text block 3 (0-based; block 4 of 12 in the paper's
# numbering); the other eleven blocks keep theirs and the generator skips block 3.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(
    language_branch=dict(adapters=dict(blocks=[b for b in range(12) if b != 3])),
    disentangler=dict(generator=dict(blocks=[b for b in range(12) if b != 3])))
