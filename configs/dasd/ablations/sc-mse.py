# DASD Table 7: L_sc as the squared error (L2) instead of L1.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(disentangler=dict(consistency_loss=dict(type='AlignmentLoss', kind='mse')))
