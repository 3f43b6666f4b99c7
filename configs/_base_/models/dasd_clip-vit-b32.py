# English CLIP ViT-B/32 (frozen) + DASD (docs/methods/dasd.md): the model of
# static-adapter_clip-vit-b32.py (the mBERT-sized embedding block, 119,547 x 768 -> W_e -> CLIP
# positions) with DASD's dynamic adapters (W_down 512->32, W_up 32->512) in place of the static
# ones and the semantics disentangling module of dasd_sdm.py (f^sr = W_p^sr LN(x_EOS); the pair
# discriminator reads 512 + 512 = 1024 inputs). As the paper counts its #TP (134M for five
# languages), the SDM, its generator and the discriminator exist once per target language
# (per_language=True; False shares one across languages: 102.1M for five).
_base_ = ['./static-adapter_clip-vit-b32.py', './dasd_sdm.py']
model = dict(
    language_branch=dict(adapters=dict(_delete_=True, **_base_.dasd_adapters)),
    disentangler=dict(_base_.dasd_disentangler, per_language=True))
paper_figures = dict(source='DASD (Cai et al., AAAI 2025), Table 1: #TP for its five target '
                     'languages (de, fr, cs, zh, ja)',
                     trainable_parameters=134e6)
