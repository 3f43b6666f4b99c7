# PECTVLM, XTD10 few-shot (50 images), German, LoRA r = 1 on query/value of M-CLIP's XLM-R:
# routine 3 with the symmetric contrastive alignment (scale 100) instead of MSE.
_base_ = ['./lora-r1_mclip-xlmr-l14_xtd10-fewshot50_routine3_de.py']

model = dict(losses=dict(align=dict(kind='contrastive', temperature=0.01)))
