# xmr's plain dual-encoder baseline, not a row of CDDS's Table 4 (its bases are VSE++, SCAN, SGR,
# CHAN and LAPS: dual-encoder-vsepp_*.py is the VSE++ row): the ViT-B/16 + BERT towers of
# cdds_vit-bert-b16_flickr30k.py without the CDDS UNets, their own CLS embeddings contrasted
# (InfoNCE), same data and schedule.
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(disentangler=None,
             losses=dict(itc=dict(type='InfoNCELoss', temperature=0.05, learnable=True)),
             retrieval_score='pooled')
# The plain dual encoder retrieves by the cosine of its towers' embeddings.
val_evaluator = dict(_base_.val_evaluator, scoring='embedding')
test_evaluator = [val_evaluator]

# The CDDS phase's schedule (epochs, rates, warm-up) for the towers and the loss's temperature;
# the VSE++ row of Table 4 and the distribution-sampling variants vary this phase.
dual_encoder_phase = dict(_base_.train_cfg.phases[0], name='dual_encoder',
                          trainable=['backbone', 'losses'], loss_weights=dict(itc=1.0))
train_cfg = dict(phases=[dual_encoder_phase])

# CDDS's distribution sampling as a plug-in loss, for the "+ distribution sampling" rows: the
# towers' token outputs are taken whole as the semantics, the column correlation of the batch
# picks the related columns, quantile sampling builds x-semantic tokens, and L_s contrasts each
# modality's tokens with the other's x-semantic tokens.
distribution_sampling_loss = dict(
    type='CDDSDistributionSamplingLoss',
    correlation=dict(mode='batch', weighting='mask', init_sparsity=1.0),
    temperature=0.05, scoring='patch_word')
