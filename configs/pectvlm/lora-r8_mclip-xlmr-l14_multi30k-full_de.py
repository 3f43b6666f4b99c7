# PECTVLM, Multi30K full data, German, LoRA r = 8 (alpha 16) on query/value of M-CLIP's XLM-R
# (run_choose_pet_task1.py's default rank), image-text contrastive on the German captions
# (baseline 1); set model.routine (and an align weight) for a translation-based routine.
_base_ = ['./_base_/multi30k_full.py']

model = dict(language_branch=dict(
    adapters=dict(_delete_=True, type='LoRA', r=8, alpha=16, targets=['q', 'v'])))
paper_figures = dict(source="PECTVLM (Zhang et al., 2023): LoRA's share of the text encoder per "
                     'language', language_share=0.0016)
