# DASD Table 10: no dynamic adapter after text block 4 (0-based; block 5 of 12 in the paper's
# numbering); the other eleven blocks keep theirs and the generator skips block 4.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(
    language_branch=dict(adapters=dict(blocks=[b for b in range(12) if b != 4])),
    disentangler=dict(generator=dict(blocks=[b for b in range(12) if b != 4])))
