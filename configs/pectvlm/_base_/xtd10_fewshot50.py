# PECTVLM's XTD10 few-shot setting for one target language (run_cross.py and scripts/*.sh of the
# authors' code): the seed-42 split of the 1,000 XTD10 images (50 train, 50 val, 900 test), one
# caption per image and language; 50 epochs of the 50 training pairs at batch 5 (500 steps),
# Adam lr 1e-4 without weight decay, cosine decay without warm-up; validation every 5 steps on
# the 50 val images, keeping the best by the mean of R@1 both ways (mAR with recall_ks (1,)),
# which is also the test score on the 900 test images. Only the language's module trains.
#
# Data: tools/data/prepare_xtd10.py (xtd10_test.json), then attach PECTVLM's translations to it
# before splitting: tools/data/attach_translations.py --translations <lang>=translated_from_en/..
# and tools/data/attach_back_translations.py --back-translations <lang>=translated_to_en/..,
# then tools/data/few_shot_split.py --protocol split --shots 50 --seed 42 (docs/methods/pectvlm.md).
# Another language: see ../xtd10_fewshot50_lora-r1_routine3_ja.py.
_base_ = [
    '../../_base_/models/mclip-xlmr-large-vit-l14_pectvlm.py',
    '../../_base_/datasets/xtd10_clft.py',
    '../../_base_/default_runtime.py',
]
language = 'de'
media_transform = dict(type='MediaTransform', backbone='ViT-L-14', pretrained='openai')
epochs = 50
batch_size = 5
shots = 50
lambda_align = 0.5  # text_loss_ratio of scripts/de.sh; the grid: 0.3, 0.1, 0.03, 0.01, 0.003

model = dict(language_branch=dict(languages=[language]))
train_dataloader = dict(
    batch_size=batch_size, num_workers=2,
    dataset=dict(target_langs=[language], transform=media_transform,
                 translated_texts=['source_to_target', 'target_to_source']))
val_dataloader = dict(
    batch_size=100, num_workers=2,
    dataset=dict(languages=['en', language], back_translated_languages=[language],
                 transform=media_transform))
test_dataloader = dict(
    batch_size=100, num_workers=2,
    dataset=dict(languages=['en', language], back_translated_languages=[language],
                 transform=media_transform))
# recall_ks (1,): AR = mean of t2i and i2t R@1, PECTVLM's score; mAR averages the target only.
val_evaluator = dict(type='RetrievalMetric', languages=['en', language],
                     mean_languages=[language], recall_ks=(1,))
test_evaluator = val_evaluator

phase = dict(name='pectvlm', iters=epochs * shots // batch_size, lr=1e-4, warmup_ratio=0.0,
             schedule='cosine', trainable=['language_branch.adapters'],
             loss_weights=dict(cm=1.0))
train_cfg = dict(type='PhasedTrainLoop', val_interval=5, validate_at_phase_end=True,
                 phases=[phase])
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
optim_wrapper = dict(
    type='OptimWrapper',
    constructor='PhasedOptimWrapperConstructor',
    optimizer=dict(type='Adam', lr=1e-4, weight_decay=0.0))
param_scheduler = None
default_hooks = dict(checkpoint=dict(interval=-1, save_best='mAR', rule='greater',
                                     save_last=True))
randomness = dict(seed=1)
