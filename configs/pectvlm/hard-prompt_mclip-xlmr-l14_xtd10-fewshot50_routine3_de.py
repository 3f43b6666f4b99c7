# PECTVLM, XTD10 few-shot (50 images), German, routine 3 with a trainable hard prompt: the
# embeddings of "a photo of" (PECTVLM's best English prompt) initialise prompt vectors inserted
# after <s>, then trained.
_base_ = ['./lora-r1_mclip-xlmr-l14_xtd10-fewshot50_routine3_de.py']

# Only the prompt trains: the authors' prompt runs (run_XTD.py, OpenDelta's SoftPromptModel
# without unfrozen_modules) tune no LayerNorm and no head, which the LoRA base copies.
model = dict(language_branch=dict(
    tuned_weights=[],
    adapters=dict(_delete_=True, type='HardPrompt', text='a photo of', trainable=True)))
# The paper's share of the few-shot setting is LoRA's.
paper_figures = None
