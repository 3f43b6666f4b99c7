# DASD Table 6, without L_sc: f^sr is still computed and feeds the generator, but nothing ties it
# to the source embedding r^S.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(disentangler=dict(use_consistency_loss=False))
