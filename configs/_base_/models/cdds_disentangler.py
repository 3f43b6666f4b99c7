# CDDS's semantic disentangling UNets with the paper's settings (2 encoder and 2 decoder layers per
# UNet; the rest are xmr's defaults, docs/methods/cdds.md lists every choice), and the retriever
# CDDS trains them in: an English image-text dual encoder whose tokens the UNets decouple, trained
# on the CDDS terms alone (the paper's objective, Eq. 15: no global InfoNCE; the _itc variant adds
# one) and retrieving by patch-word matching of the semantic components (§3.5). A backbone's
# model config completes it: model = dict(_base_.cdds_retriever, backbone=...).
cdds_disentangler = dict(
    type='CDDSDisentangler', num_heads=8, num_encoder_layers=2, num_decoder_layers=2,
    num_perturbations=4, noise_std=0.1, ffn_ratio=4.0, dropout=0.0, hidden_dim=1024,
    correlation=dict(mode='batch', weighting='mask', init_sparsity=1.0),
    temperature=0.05, scoring='patch_word', pooling='mean',
    alpha_s=1.0, alpha_m=1.0, alpha_f=0.5)
cdds_retriever = dict(
    type='DualEncoderRetriever',
    disentangler=cdds_disentangler,
    losses=dict(),
    languages=['en'],
    train_text='source',
    retrieval_score='patch_word',
)
