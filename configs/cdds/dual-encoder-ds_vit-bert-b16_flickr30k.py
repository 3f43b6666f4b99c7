# CDDS's Table 4: distribution sampling as a plug-in loss for the plain dual encoder. The towers'
# token outputs are taken whole as the semantics: the column correlation of the batch picks the
# related columns, quantile sampling builds x-semantic tokens, and L_s contrasts each modality's
# tokens with the other's x-semantic tokens, next to the baseline's InfoNCE.
_base_ = ['./dual-encoder_vit-bert-b16_flickr30k.py']

model = dict(losses=dict(distribution_sampling=dict(
    type='CDDSDistributionSamplingLoss', correlation=dict(mode='batch', weighting='mask',
                                                              init_sparsity=1.0),
    temperature=0.05, scoring='patch_word')))

train_cfg = dict(
    phases=[
        dict(name='dual_encoder_ds', epochs={{_base_.num_epochs}}, lr=2e-4, warmup_ratio=0.04,
             schedule='cosine', trainable=['backbone', 'losses'], lr_mult={'backbone': 0.1},
             loss_weights=dict(itc=1.0, distribution_sampling=1.0)),
    ])
