# DASD on English CLIP ViT-B/32, Multi30K, Cross-lingual Finetune setting (DASD Table 1):
#   0. source_finetune: CLIP fine-tuned on the English Multi30K captions (5 epochs, lr 3e-6;
#      5,660 iterations on task 2's 145,000 captions at batch 128);
#   1. cross_lingual: towers frozen; embedding block, dynamic adapters and the disentangler learn
#      de/fr/cs from MT(DTD) text pairs: L_CL + lambda1 L_adv + lambda2 L_sc (45k steps, lr 2e-4);
#   2. cross_modal: the same modules on image + caption pairs: L_CM + lambda1 L_adv + lambda2 L_sc
#      (6k steps, lr 6e-6).
# lambda1 = 1, lambda2 = 0.1; warm-up over 10% of each phase then cosine; batch 128; the model is
# selected on Multi30K val by mAR (de, fr, cs). Phases: ../_base_/schedules/dasd_clft_phases.py;
# method and choices: docs/methods/dasd.md.
_base_ = [
    '../_base_/models/dasd_clip-vit-b32.py',
    '../_base_/datasets/multi30k_clft.py',
    '../_base_/schedules/dasd_clft_phases.py',
    '../_base_/default_runtime.py',
]

# The authors fine-tune English CLIP with a fixed logit scale of 100.
model = dict(language_branch=dict(languages={{_base_.target_langs}}),
             losses=dict(source_cm=dict(type='InfoNCELoss', temperature=0.01)))
