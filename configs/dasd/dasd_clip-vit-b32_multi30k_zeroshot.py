# DASD on English CLIP ViT-B/32, Multi30K, Zero-shot setting (DASD Table 1): the target languages
# de/fr/cs are learnt from CC300K (English Conceptual Captions with machine translations) and
# never from Multi30K; CLIP is not fine-tuned. Phases as in dasd_clip-vit-b32_multi30k_clft.py
# without stage 0: cross_lingual on CC300K text pairs, then cross_modal on CC300K images.
_base_ = [
    '../_base_/models/clip-vit-b32_dasd.py',
    '../_base_/datasets/multi30k_zeroshot.py',
    '../_base_/schedules/dasd_phases.py',
    '../_base_/default_runtime.py',
]

model = dict(language_branch=dict(languages={{_base_.target_langs}}))

dasd_trainable = ['language_branch', 'disentangler']
train_cfg = dict(
    _delete_=True,
    type='PhasedTrainLoop',
    val_interval=5000,
    phases=[
        dict(name='cross_lingual', iters=45000, lr=2e-4, warmup_ratio=0.1, schedule='cosine',
             trainable=dasd_trainable, loss_weights=dict(cl=1.0, adv=1.0, sc=0.1),
             dataloader={{_base_.text_train_dataloader}}),
        dict(name='cross_modal', iters=6000, lr=6e-6, warmup_ratio=0.1, schedule='cosine',
             trainable=dasd_trainable, loss_weights=dict(cm=1.0, adv=1.0, sc=0.1)),
    ])

val_evaluator = dict(type='RetrievalMetric', languages={{_base_.eval_langs}},
                     source_language='en')
test_evaluator = val_evaluator
