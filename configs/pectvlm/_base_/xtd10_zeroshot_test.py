# Zero-shot M-CLIP on XTD10, nothing trained: the 900 test images of PECTVLM's seed-42 split,
# every XTD10 language, scored by the mean of R@1 both ways (mAR with recall_ks (1,), over the
# ten target languages; English through the plain tower). Each language goes through the branch
# with its own (untrained) module, which the leaf configs set: none (M-CLIP itself) or a prompt.
# Evaluate with the runner's test loop (no checkpoint: the frozen M-CLIP is the model; the
# config sets no work_dir, which load_run_config adds: work_dirs/<config name>), e.g.
#   Runner.from_cfg(load_run_config('configs/pectvlm/mclip-xlmr-l14_xtd10_zeroshot.py')).test()
_base_ = [
    '../../_base_/models/pectvlm_mclip-xlmr-large-vit-l14.py',
    '../../_base_/datasets/xtd10_clft.py',
    '../../_base_/default_runtime.py',
]
media_transform = dict(type='MediaTransform', backbone='ViT-L-14', pretrained='openai')
target_langs = ['de', 'fr', 'es', 'it', 'ja', 'ko', 'pl', 'ru', 'tr', 'zh']

model = dict(language_branch=dict(languages=target_langs, adapters=None))
train_dataloader = None
val_dataloader = None
val_cfg = None
test_dataloader = dict(batch_size=100, dataset=dict(transform=media_transform))
test_evaluator = dict(type='RetrievalMetric', languages=['en', *target_langs],
                      mean_languages=target_langs, recall_ks=(1,))
