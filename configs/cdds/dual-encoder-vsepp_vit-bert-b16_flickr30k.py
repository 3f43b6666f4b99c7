# CDDS's Table 4, its VSE++ row: the plain dual encoder on CDDS's ViT-B/16 + BERT towers trained
# with VSE++'s hinge-based triplet loss (margin 0.2) as LAPS trains it: summed over the negatives
# for the first epoch (Flickr30K's 145,000 training pairs: the loss counts the pairs of the global
# batches it trains on, so at any batch size and under DDP too), each query's hardest negative
# after it, and, as LAPS masks them, the other captions of a query's image in the batch are no
# negatives of it.
# Same data and schedule as dual-encoder_vit-bert-b16_flickr30k.py (InfoNCE); the loss has no
# weights.
_base_ = ['./dual-encoder_vit-bert-b16_flickr30k.py']

model = dict(losses=dict(itc=dict(_delete_=True, type='VSEHingeLoss', margin=0.2,
                                  hardest_after_pairs=145000,
                                  mask_same_media=True)))
dual_encoder_phase = dict(_base_.dual_encoder_phase, trainable=['backbone'])
train_cfg = dict(phases=[dual_encoder_phase])
