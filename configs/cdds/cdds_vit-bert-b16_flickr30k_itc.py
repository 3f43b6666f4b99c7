# A variant, not the paper's objective: cdds_vit-bert-b16_flickr30k.py plus a global InfoNCE
# (`itc`, learned temperature from 0.05) between the pooled semantic components, weighted 1 : 1
# with the CDDS terms. Eq. 15 has no such term; xmr's earlier default had it.
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(losses=dict(itc=dict(type='InfoNCELoss', temperature=0.05, learnable=True)))

train_cfg = dict(
    phases=[
        dict(name='cdds_itc', epochs={{_base_.num_epochs}}, lr=2e-4, warmup_ratio=0.04,
             schedule='cosine', trainable=['backbone', 'disentangler', 'losses'],
             lr_mult={'backbone': 0.1}, loss_weights=dict(disentangler=1.0, itc=1.0)),
    ])
