# The LoRA twin of ../dasd/dasd_clip-vit-b32_msrvtt_clft.py: English CLIP
# ViT-B/32 frozen, the same mBERT-sized embedding block, and per language a LoRA on the query and
# value projections of the 12 text blocks (PECTVLM's setting: r = 1, alpha = 16; B starts at
# zero) instead of the dynamic adapters; no disentangler. Same data, phases, steps and learning
# rates; the cross-lingual and cross-modal phases keep L_CL and L_CM and drop DASD's L_adv and
# L_sc. Method: docs/methods/pectvlm.md.
_base_ = ['../dasd/dasd_clip-vit-b32_msrvtt_clft.py',
          '../_base_/models/pectvlm_lora.py']

model = dict(language_branch=dict(adapters=dict(_delete_=True, **_base_.pectvlm_lora)),
             disentangler=None)
# DASD's #TP (the DASD config's paper_figures) is no figure of this twin, which no paper reports.
paper_figures = None
