# The bundled synthetic image-caption set (docs/data_synthetic.md): rendered on the fly, nothing to
# download. English captions plus German, French, Chinese and Japanese, several styles each;
# 32 px images, the tiny CLIP's input size (its vision_cfg.image_size).
target_langs = ['de', 'fr', 'zh', 'ja']
eval_langs = ['en', *target_langs]

_loader = dict(num_workers=0, collate_fn=dict(type='xmr.retrieval_collate'))
_train_loader = dict(**_loader, batch_size=128, drop_last=True,
                     sampler=dict(type='DefaultSampler', shuffle=True))
_eval_loader = dict(**_loader, batch_size=250, drop_last=False,
                    sampler=dict(type='DefaultSampler', shuffle=False))

# English + one target caption per item (cross-lingual and cross-modal phases).
train_dataloader = dict(
    **_train_loader,
    dataset=dict(type='SyntheticPairDataset', num_scenes=20000,
                 languages=target_langs, split='train', image_size=32, seed=0))
# English pairs alone, for pretraining the tiny CLIP (source_finetune).
source_finetune_dataloader = dict(
    **_train_loader,
    dataset=dict(type='SyntheticPairDataset', num_scenes=20000, languages=[],
                 split='train', image_size=32, seed=0))
# Unseen scene combinations (the split is semantic), each caption has exactly one image.
val_dataloader = dict(
    **_eval_loader,
    dataset=dict(type='SyntheticRetrievalDataset', num_scenes=500, languages=eval_langs,
                 split='val', image_size=32, seed=0, captions_per_image=2))
test_dataloader = dict(
    **_eval_loader,
    dataset=dict(type='SyntheticRetrievalDataset', num_scenes=1000, languages=eval_langs,
                 split='test', image_size=32, seed=0, captions_per_image=2))
val_evaluator = dict(type='RetrievalMetric', languages=eval_langs, source_language='en')
test_evaluator = val_evaluator
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
