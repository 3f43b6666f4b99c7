# PECTVLM, Multi30K full data, German, Compacter (PHM layers with n = 4 Kronecker summands,
# rank-1 factors, a rule A_i per layer as in OpenDelta's CompacterModel, bottleneck 1024 / 16 = 64)
# at the same places as the Houlsby adapter; image-text contrastive on the German captions.
_base_ = ['./_base_/multi30k_full.py']

model = dict(language_branch=dict(
    adapters=dict(_delete_=True, type='CompacterAdapter', reduction_factor=16, phm_dim=4,
                  rank=1)))
