# DASD Table 10: no dynamic adapter after text block 5 (0-based; block 6 of 12 in the paper's
# numbering); the other eleven blocks keep theirs; the generator follows them and skips block 5.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(language_branch=dict(adapters=dict(blocks=[0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11])))
