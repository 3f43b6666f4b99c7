# DASD on English CLIP ViT-B/32, Multi-MSRVTT video, Cross-lingual Finetune setting (DASD Table 2):
# a video is 12 uniformly sampled frames encoded as images and mean-pooled (CLIP4Clip's
# mean-pooling); stage 0 fine-tunes CLIP on the English captions of the 7k training videos (5
# epochs: 5,475 iterations on the 140,200 captions at batch 128), then the eight target languages
# are learnt from their machine translations. Model selection on the
# held-out MSRVTT videos queried with machine translations; test on the 1k-A clips, text->video
# R@1 per language and their sum (t2v_R@1_sum). The authors released no video code: the recipe
# is the paper's image recipe with video media.
_base_ = [
    '../_base_/models/dasd_clip-vit-b32.py',
    '../_base_/datasets/msrvtt_clft.py',
    '../_base_/schedules/dasd_clft_phases.py',
    '../_base_/default_runtime.py',
]

model = dict(language_branch=dict(languages={{_base_.target_langs}}),
             losses=dict(source_cm=dict(type='InfoNCELoss', temperature=0.01)))

default_hooks = dict(checkpoint=dict(save_best='t2v_R@1_sum'))
