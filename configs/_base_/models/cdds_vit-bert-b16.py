# CDDS's own towers: ViT-B/16 (timm 'orig_in21k', the weights of google/vit-base-patch16-224-in21k
# that LAPS loads) and bert-base-uncased, each followed by a linear map to 512; the CDDS UNets on
# their tokens (197 image tokens: CLS + 14 x 14 patches; BERT's word pieces with [CLS]/[SEP]).
# Both towers train with the UNets (at 0.1 x the learning rate, as in LAPS).
model = dict(
    type='DualEncoderRetriever',
    backbone=dict(type='ViTBERTBackbone', vision='vit_base_patch16_224.orig_in21k',
                  vision_pretrained=True, text='bert-base-uncased', embed_dim=512,
                  tokenizer=dict(type='HFTokenizer', name_or_path='bert-base-uncased',
                                 max_length=64)),
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
