# DASD Table 7: L_sc as the smooth L1 (Huber, beta 1) loss, the authors' released choice.
model = dict(disentangler=dict(consistency_loss=dict(type='AlignmentLoss', kind='smooth_l1')))
