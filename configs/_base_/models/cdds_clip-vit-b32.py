# English CLIP ViT-B/32 (open_clip, OpenAI weights) as an image-text dual encoder whose tokens CDDS
# decouples: 50 image tokens (class token + 7 x 7 patches) and up to 77 word tokens, all through
# CLIP's final norm and projection (512). Paper settings: 2 encoder and 2 decoder layers per UNet;
# the rest are xmr's defaults (docs/methods/cdds.md lists every choice).
model = dict(
    type='DualEncoderRetriever',
    backbone=dict(type='OpenCLIPBackbone', arch='ViT-B-32', pretrained='openai'),
    disentangler=dict(
        type='CDDSDisentangler', num_heads=8, num_encoder_layers=2, num_decoder_layers=2,
        num_perturbations=4, noise_std=0.1, ffn_ratio=4.0, dropout=0.0, hidden_dim=1024,
        correlation=dict(mode='batch', weighting='mask', init_sparsity=1.0),
        temperature=0.05, scoring='patch_word', pooling='mean',
        alpha_s=1.0, alpha_m=1.0, alpha_f=0.5),
    # The paper's objective (Eq. 15): the CDDS terms alone, no global InfoNCE (the _itc variant
    # adds one); retrieval by patch-word matching of the semantic components (§3.5).
    losses=dict(),
    languages=['en'],
    train_text='source',
    retrieval_score='patch_word',
)
