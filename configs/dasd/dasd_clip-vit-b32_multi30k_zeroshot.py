# DASD on English CLIP ViT-B/32, Multi30K, Zero-shot setting (DASD Table 1): the target languages
# de/fr/cs are learnt from CC300K (English Conceptual Captions with machine translations) and
# never from Multi30K; CLIP is not fine-tuned. Phases as in dasd_clip-vit-b32_multi30k_clft.py
# without stage 0: cross_lingual on CC300K text pairs, then cross_modal on CC300K images.
_base_ = [
    '../_base_/models/dasd_clip-vit-b32.py',
    '../_base_/datasets/multi30k_zeroshot.py',
    '../_base_/schedules/dasd_dynamic_phases.py',
    '../_base_/default_runtime.py',
]

model = dict(language_branch=dict(languages={{_base_.target_langs}}))
