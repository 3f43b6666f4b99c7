# DASD on the bundled demo (configs/demo/static_tiny-clip_synthetic.py): the same tiny CLIP, data,
# seed, phases and steps; the static adapters are replaced by DASD's dynamic adapters (d_u 32)
# whose middle matrices W^z the semantics disentangling module generates per caption, and the
# alignment phases add lambda1 L_adv + lambda2 L_sc (1 and 0.1) and train the disentangler too.
# Table of static vs DASD vs ablations (--ablation dasd/no-sc, ...): docs/methods/dasd.md.
_base_ = ['./static_tiny-clip_synthetic.py', '../_base_/models/dasd_sdm.py']

# A smaller generator latent for the tiny model: d_z 64 (512 in the paper).
model = dict(
    language_branch=dict(adapters=dict(_delete_=True, **_base_.dasd_adapters)),
    disentangler=dict(_base_.dasd_disentangler, generator=dict(d_z=64, d_u=32)))
