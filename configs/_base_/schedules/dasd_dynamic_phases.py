# DASD's two alignment phases with dynamic adapters and the semantic disentangling module (SDM),
# on the optimiser of alignment_phases.py; the towers stay frozen (paper Sec. 4.1, REFERENCE.md):
#   1. cross_lingual: L_CL + lambda1 L_adv + lambda2 L_sc on text pairs (45k steps, lr 2e-4);
#   2. cross_modal: L_CM + lambda1 L_adv + lambda2 L_sc on media + caption pairs (6k, lr 6e-6);
# lambda1 = 1, lambda2 = 0.1. The dataset config supplies text_train_dataloader (phase 1) and
# train_dataloader (phase 2). The Zero-shot configs and CCLM + DASD use these phases as they are;
# dasd_clft_phases.py puts the source finetune of CLIP in front.
_base_ = ['./alignment_phases.py']

train_cfg = dict(phases=[
    dict(name='cross_lingual', iters=45000, lr=2e-4, warmup_ratio=0.1, schedule='cosine',
         trainable=['target'], loss_weights=dict(cl=1.0, disentangler=1.0),
         dataloader='text_train_dataloader', cache_features=True),
    dict(name='cross_modal', iters=6000, lr=6e-6, warmup_ratio=0.1, schedule='cosine',
         trainable=['target'], loss_weights=dict(cm=1.0, disentangler=1.0),
         cache_features=True),
])
