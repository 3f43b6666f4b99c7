# DASD's trainable parts on any frozen backbone (docs/methods/dasd.md), as variables that a model
# config places (configs/_base_/models/dasd_clip-vit-b32.py, dasd_cclm.py, the demo):
#   dasd_adapters: a dynamic adapter after every text block, W_down D->32, W_up 32->D, one set
#       per target language, its middle matrix W^z generated per caption;
#   dasd_disentangler: the semantics disentangling module shared by all languages: the first
#       k=1 frozen text block with bottleneck adapters A^sr / A^sa (hidden 256),
#       f^sr = W_p^sr LN(x_pool), f^sa = mean of LN(x_t) over the real tokens, the parameter
#       generator z = MLP([f^sr; f^sa]) (d_z 512), W_i^z = reshape(W_i^down z) (d_u 32),
#       L_sc = L1(f^sr, r^S), and the pair discriminator (-> 256 -> 128 -> 1, Tanh) behind
#       gradient reversal for L_adv.
dasd_adapters = dict(type='DynamicAdapter', hidden=32)
dasd_disentangler = dict(
    type='SemanticsDisentangler',
    depth=1,
    adapter=dict(type='StaticAdapter', hidden=256),
    features=['sr', 'sa'],
    generator=dict(d_z=512, d_u=32),
    consistency_loss=dict(type='AlignmentLoss', kind='l1'),
    discriminator=dict(hidden=(256, 128)),
    # lambda_1 (L_adv) and lambda_2 (L_sc) of Eq. 12; phases scale them as a whole.
    loss_weights=dict(adv=1.0, sc=0.1))
