# PECTVLM's XTD10 few-shot setting for one target language: the seed-42 split of the 1,000 XTD10
# images (50 train, 50 val, 900 test), one caption per image and language (run_cross.py of the
# authors' code); the paper's schedule (Appendix A): 40 epochs of the 50 training pairs at batch
# 10 (200 steps), Adam lr 1e-4 without weight decay, cosine decay without warm-up, validation
# every 5 steps on the 50 val images, keeping the best by the mean of R@1 both ways (mAR with
# recall_ks (1,)), which is also the test score on the 900 test images. Only the language's
# module trains: its PEFT module with its own copies of both LayerNorms of every layer and of the
# linear head (run_cross.py unfreezes 'deltas', 'output.LayerNorm' and 'LinearTransformation';
# the 'pooler' it also unfreezes is never read by M-CLIP); the prompt configs train the prompt
# alone, as run_XTD.py does. The authors' scripts/*.sh train 50
# epochs at batch 5 (500 steps): --ablation pectvlm/authors-script-xtd10.
#
# Data: tools/data/prepare_xtd10.py (xtd10_test.json), then attach the PECTVLM translations the
# routine reads to it before splitting (routine 2: tools/data/attach_translations.py
# --translations <lang>=translated_from_en/..; translate-test and routine 3:
# tools/data/attach_back_translations.py --back-translations <lang>=translated_to_en/..; the
# baseline and routine 1 read neither), then tools/data/few_shot_split.py --protocol split --shots
# 50 --seed 42 (docs/methods/pectvlm.md). Another language: see
# ../lora-r1_mclip-xlmr-l14_xtd10-fewshot50_routine3_ja.py.
_base_ = ['../../_base_/datasets/xtd10_clft.py', './recipe.py']
media_transform = _base_.mclip_transform
phase = dict(_base_.phase, epochs=40)
model = dict(language_branch=dict(
    tuned_weights=[*_base_.mclip_layer_norms, *_base_.mclip_head]))
# The abstract's share for LoRA; xmr counts LoRA r = 1 with the LayerNorms and the head
# (docs/methods/pectvlm.md, "Capacity").
paper_figures = dict(source='PECTVLM (Zhang et al., 2023), abstract: parameters added per '
                     'language in the few-shot setting', language_share=0.0016)

train_dataloader = dict(batch_size=10, num_workers=2, dataset=_base_.train_dataset)
val_dataloader = dict(batch_size=100, num_workers=2, dataset=_base_.eval_dataset)
test_dataloader = val_dataloader
val_evaluator = _base_.target_evaluator
test_evaluator = val_evaluator
train_cfg = dict(val_interval=5, phases=[phase])
# 200 steps: resumable checkpoints every 50 (the default 1,000 would save none before the end).
default_hooks = dict(checkpoint=dict(interval=50))
