# CDDS's Table 4, its VSE++ row: the plain dual encoder on CDDS's ViT-B/16 + BERT towers trained
# with VSE++'s hinge-based triplet loss (margin 0.2) as LAPS trains it: summed over the negatives
# for the first epoch, each query's hardest negative after it (hardest_after counts this
# process's iterations: under DDP, one epoch is that many divided by the processes). Same data
# and schedule as dual-encoder_vit-bert-b16_flickr30k.py (InfoNCE); the loss has no weights.
_base_ = ['./dual-encoder_vit-bert-b16_flickr30k.py']

model = dict(losses=dict(itc=dict(_delete_=True, type='VSEHingeLoss', margin=0.2,
                                  hardest_after={{_base_.epoch}})))
dual_encoder_phase = dict(_base_.dual_encoder_phase, trainable=['backbone'])
train_cfg = dict(phases=[dual_encoder_phase])
