# DASD on English CLIP ViT-B/32, MSCOCO, Cross-lingual Finetune setting (DASD Table 1, ja and zh):
# stage 0 fine-tunes CLIP on the English Karpathy train captions (5 epochs: 22,135 iterations on
# the ~566.7k captions at batch 128), then the target languages are learnt from their machine
# translations (MT(DTD)). Japanese is evaluated on STAIR Captions of the Karpathy splits, Chinese
# on COCO-CN. Phases and weights as in dasd_clip-vit-b32_multi30k_clft.py.
_base_ = [
    '../_base_/models/dasd_clip-vit-b32.py',
    '../_base_/datasets/mscoco_clft.py',
    '../_base_/schedules/dasd_clft_phases.py',
    '../_base_/default_runtime.py',
]

model = dict(language_branch=dict(languages={{_base_.target_langs}}),
             losses=dict(source_cm=dict(type='InfoNCELoss', temperature=0.01)))
