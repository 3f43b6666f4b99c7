# DASD Table 9: the target branch runs the first 1 of CLIP's 12 text blocks (each with its dynamic
# adapter) before ln_final and the projection; the generator makes W^z for those blocks only.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(language_branch=dict(num_blocks=1))
