# The demo's tiny open_clip CLIP (random weights; 32 px images, patch 8, so 1 + 16 image tokens;
# a 2-layer text tower of width 64) as an image-text dual encoder whose patch and word tokens CDDS
# decouples. Both towers and the UNets train together, as in CDDS's own setting; retrieval is the
# paper's patch-word matching of the semantic components (the evaluators add their pooled cosine
# under pooled/).
tiny_clip = dict(
    embed_dim=64,
    vision_cfg=dict(image_size=32, layers=3, width=96, patch_size=8, head_width=32),
    text_cfg=dict(context_length=40, vocab_size=49408, width=64, heads=4, layers=2),
)
model = dict(
    type='DualEncoderRetriever',
    backbone=dict(type='OpenCLIPBackbone', arch=None, model_cfg=tiny_clip, pretrained=None),
    disentangler=dict(
        type='CDDSDisentangler', num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
        num_perturbations=2, noise_std=0.1, ffn_ratio=2.0,
        correlation=dict(mode='batch', weighting='shrinkage', init_sparsity=1.0),
        temperature=0.05, scoring='patch_word', pooling='mean',
        alpha_s=1.0, alpha_m=1.0, alpha_f=0.5),
    # tower_itc trains the towers from random weights on their own pooled embeddings (the demo's
    # first phase): through the randomly initialised UNets alone they learn far more slowly.
    losses=dict(itc=dict(type='InfoNCELoss', temperature=0.05, learnable=True),
                tower_itc=dict(type='InfoNCELoss', temperature=0.05, learnable=True)),
    languages=['en'],
    train_text='source',
    # The paper's retrieval (§3.5): patch-word matching of the semantic components.
    retrieval_score='patch_word',
)
