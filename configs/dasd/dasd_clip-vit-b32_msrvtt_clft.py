# DASD on English CLIP ViT-B/32, Multi-MSRVTT video, Cross-lingual Finetune setting (DASD Table 2):
# a video is 12 uniformly sampled frames encoded as images and mean-pooled (CLIP4Clip's
# mean-pooling); stage 0 fine-tunes CLIP on the English captions of the 7k training videos, then
# the eight target languages are learnt from their machine translations. Model selection on the
# held-out MSRVTT videos queried with machine translations; test on the 1k-A clips, text->video
# R@1 per language and their sum (t2v_R@1_sum). The authors released no video code: the recipe
# is the paper's image recipe with video media.
_base_ = [
    '../_base_/models/clip-vit-b32_dasd.py',
    '../_base_/datasets/msrvtt_clft.py',
    '../_base_/schedules/dasd_phases.py',
    '../_base_/default_runtime.py',
]

model = dict(language_branch=dict(languages={{_base_.target_langs}}),
             losses=dict(source_cm=dict(type='InfoNCELoss', temperature=0.01)))

dasd_trainable = ['language_branch', 'disentangler']
train_cfg = dict(
    _delete_=True,
    type='PhasedTrainLoop',
    val_interval=5000,
    phases=[
        # 5 epochs of the 140,200 English captions of the 7k training videos at batch 128
        # (1,095 iterations each).
        dict(name='source_finetune', iters=5475, lr=3e-6, warmup_ratio=0.1, schedule='cosine',
             trainable=['backbone'], loss_weights=dict(source_cm=1.0),
             dataloader={{_base_.source_finetune_dataloader}}),
        dict(name='cross_lingual', iters=45000, lr=2e-4, warmup_ratio=0.1, schedule='cosine',
             trainable=dasd_trainable, loss_weights=dict(cl=1.0, adv=1.0, sc=0.1),
             dataloader={{_base_.text_train_dataloader}}),
        dict(name='cross_modal', iters=6000, lr=6e-6, warmup_ratio=0.1, schedule='cosine',
             trainable=dasd_trainable, loss_weights=dict(cm=1.0, adv=1.0, sc=0.1)),
    ])

val_evaluator = dict(type='RetrievalMetric', protocol='text_to_video', source_language='en')
test_evaluator = dict(type='RetrievalMetric', protocol='text_to_video',
                      languages={{_base_.eval_langs}}, source_language='en')
default_hooks = dict(checkpoint=dict(save_best='t2v_R@1_sum'))
