# PECTVLM, XTD10 few-shot (50 images), German, routine 3 with a soft prompt instead of LoRA: 4
# vectors N(0, 0.02) inserted after <s> of every caption (mask extended, pooled with the words).
_base_ = ['./lora-r1_mclip-xlmr-l14_xtd10-fewshot50_routine3_de.py']

# Only the prompt trains: the authors' prompt runs (run_XTD.py, OpenDelta's SoftPromptModel
# without unfrozen_modules) tune no LayerNorm and no head, which the LoRA base copies.
model = dict(language_branch=dict(
    tuned_weights=[],
    adapters=dict(_delete_=True, type='SoftPrompt', num_tokens=4, init_std=0.02)))
# The paper's share of the few-shot setting is LoRA's.
paper_figures = None
