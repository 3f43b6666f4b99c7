# DASD Table 7: L_sc as the squared error (L2) instead of L1.
model = dict(disentangler=dict(consistency_loss=dict(type='AlignmentLoss', kind='mse')))
