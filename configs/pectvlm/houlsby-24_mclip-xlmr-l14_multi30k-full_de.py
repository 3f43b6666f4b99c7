# PECTVLM, Multi30K full data, German, Houlsby adapters (bottleneck 24, GELU, N(0, 0.01) init)
# after the attention output projection and after the FFN output projection of every XLM-R
# layer, before their residual add and LayerNorm (OpenDelta's 'attention.output.dense' and
# 'output.dense'); image-text contrastive on the German captions (baseline 1).
_base_ = ['./_base_/multi30k_full.py']

model = dict(language_branch=dict(
    adapters=dict(_delete_=True, type='HoulsbyAdapter', hidden=24, activation='gelu_new',
                  init_std=0.01)))
