# A variant, not the paper's objective: cdds_vit-bert-b16_flickr30k.py plus a global InfoNCE
# (`itc`, learned temperature from 0.05) between the pooled semantic components, weighted 1 : 1
# with the CDDS terms. Eq. 15 has no such term; xmr's earlier default had it.
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(losses=dict(itc=dict(type='InfoNCELoss', temperature=0.05, learnable=True)))

# The CDDS phase's schedule (epochs, rates, warm-up), training the loss's temperature too.
train_cfg = dict(phases=[
    dict(_base_.train_cfg.phases[0], name='cdds_itc',
         trainable=['backbone', 'disentangler', 'losses'],
         loss_weights=dict(disentangler=1.0, itc=1.0)),
])
