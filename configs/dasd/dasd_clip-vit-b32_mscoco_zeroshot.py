# DASD on English CLIP ViT-B/32, MSCOCO, Zero-shot setting (DASD Table 1, ja and zh): the target
# languages are learnt from CC300K and never from COCO; CLIP is not fine-tuned. Evaluation as in
# dasd_clip-vit-b32_mscoco_clft.py.
_base_ = [
    '../_base_/models/clip-vit-b32_dasd.py',
    '../_base_/datasets/mscoco_zeroshot.py',
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

val_evaluator = dict(type='RetrievalMetric', languages=['en', 'ja'], source_language='en')
test_evaluator = dict(type='RetrievalMetric', languages=['en', 'ja'], source_language='en',
                      protocol='coco_5k')
