# DASD Table 6, without L_sc: f^sr is still computed and feeds the generator, but nothing ties it
# to the source embedding r^S.
model = dict(disentangler=dict(use_consistency_loss=False))
