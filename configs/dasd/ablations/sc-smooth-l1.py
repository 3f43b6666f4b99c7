# DASD Table 7: L_sc as the smooth L1 (Huber, beta 1) loss, the authors' released choice.
_base_ = ['../dasd_clip-vit-b32_multi30k_clft.py']

model = dict(disentangler=dict(consistency_loss=dict(type='AlignmentLoss', kind='smooth_l1')))
