# CDDS's Table 3, "w/o decoupling": cdds_vit-bert-b16_flickr30k.py without the dual-path UNets.
# The towers' tokens are taken whole as the semantics: distribution sampling and the semantic
# consistency L_s act on them directly (the Table 4 plug-in loss, here alone, as Eq. 15 has no
# other term left without modality components); retrieval by patch-word matching of the tokens.
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(
    disentangler=None,
    losses=dict(distribution_sampling=dict(
        type='CDDSDistributionSamplingLoss', correlation=dict(mode='batch', weighting='mask',
                                                              init_sparsity=1.0),
        temperature=0.05, scoring='patch_word')))

# The CDDS phase's schedule (epochs, rates, warm-up), on the towers alone.
train_cfg = dict(phases=[
    dict(_base_.train_cfg.phases[0], name='cdds_wo_decoupling', trainable=['backbone'],
         loss_weights=dict(distribution_sampling=1.0)),
])
