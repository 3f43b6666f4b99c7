# DASD on English CLIP ViT-B/32, MSCOCO, Zero-shot setting (DASD Table 1, ja and zh): the target
# languages are learnt from CC300K and never from COCO; CLIP is not fine-tuned. Evaluation as in
# dasd_clip-vit-b32_mscoco_clft.py.
_base_ = [
    '../_base_/models/dasd_clip-vit-b32.py',
    '../_base_/datasets/mscoco_zeroshot.py',
    '../_base_/schedules/dasd_dynamic_phases.py',
    '../_base_/default_runtime.py',
]

model = dict(language_branch=dict(languages={{_base_.target_langs}}))
