# The plain dual-encoder baseline of CDDS's Table 4: the ViT-B/16 + BERT towers of
# cdds_vit-bert-b16_flickr30k.py without the CDDS UNets, their own CLS embeddings contrasted
# (InfoNCE), same data and schedule.
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(disentangler=None)

train_cfg = dict(
    phases=[
        dict(name='dual_encoder', epochs={{_base_.num_epochs}}, lr=2e-4, warmup_ratio=0.04,
             schedule='cosine', trainable=['backbone', 'losses'], lr_mult={'backbone': 0.1},
             loss_weights=dict(itc=1.0)),
    ])
