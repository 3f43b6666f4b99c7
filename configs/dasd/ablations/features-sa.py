# DASD Table 5, f^sa only: the generator reads the semantic-agnostic feature alone
# (z = MLP(f^sa)); the semantic-related stream, its projection W_p^sr and L_sc are not built.
model = dict(disentangler=dict(features=['sa'], use_consistency_loss=False))
