# DASD Table 7: L_sc as the smooth L1 (Huber, beta 1) loss in both phases: the authors' released
# code's choice for the cross-modal stage (their cross-lingual stage uses L1 since commit 7bb6b72;
# docs/methods/dasd.md, row 10).
model = dict(disentangler=dict(consistency_loss=dict(type='AlignmentLoss', kind='smooth_l1')))
