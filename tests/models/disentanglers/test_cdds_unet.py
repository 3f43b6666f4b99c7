"""Dual-path UNet of CDDS: shapes, masking, the K-perturbation average, skips, gradients."""
import pytest
import torch

from xmr.models.disentanglers.cdds import DualPathUNet

B, P, W, D = 4, 7, 5, 16


def tokens_and_mask(length: int, padded: dict[int, int], seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randn(B, length, D, generator=generator)
    mask = torch.ones(B, length, dtype=torch.bool)
    for sample, real in padded.items():
        mask[sample, real:] = False
    return tokens, mask


def make_unet(**kwargs) -> DualPathUNet:
    torch.manual_seed(0)
    return DualPathUNet(D, num_heads=2, **kwargs)


@pytest.mark.parametrize('length,padded', [(P, {0: 4, 3: 1}), (W, {1: 2})])
def test_shapes_for_patches_and_words_of_different_lengths(length, padded):
    unet = make_unet()
    tokens, mask = tokens_and_mask(length, padded)
    for mode in (unet.train, unet.eval):
        mode()
        semantic, modality = unet(tokens, mask)
        assert semantic.shape == modality.shape == (B, length, D)
        assert torch.isfinite(semantic).all() and torch.isfinite(modality).all()
        assert (semantic[~mask] == 0).all() and (modality[~mask] == 0).all()
        assert semantic[mask].abs().sum() > 0 and modality[mask].abs().sum() > 0


def test_padding_values_do_not_reach_real_tokens():
    unet = make_unet().eval()
    tokens, mask = tokens_and_mask(P, {0: 3, 2: 5})
    changed = tokens.clone()
    changed[~mask] = 100.0
    reference, altered = unet(tokens, mask), unet(changed, mask)
    torch.testing.assert_close(altered.semantic, reference.semantic)
    torch.testing.assert_close(altered.modality, reference.modality)


def test_noise_only_in_training_and_zero_noise_equals_clean_pass():
    tokens, mask = tokens_and_mask(P, {1: 3})
    unet = make_unet(num_perturbations=3).eval()
    clean = unet(tokens, mask)
    torch.testing.assert_close(unet(tokens, mask).semantic, clean.semantic)
    unet.train()
    assert not torch.allclose(unet(tokens, mask).semantic, clean.semantic)
    unet.noise_std = 0.0
    # K identical copies averaged give the single clean pass back.
    torch.testing.assert_close(unet(tokens, mask).semantic, clean.semantic)
    torch.testing.assert_close(unet(tokens, mask).modality, clean.modality)


def reference_forward(unet, tokens, mask, noise_std, copies, seed):
    """The UNet written out for two encoder and two decoder levels: each of the ``copies``
    passes adds ``noise_std · std(H_n) · ε`` to the bottleneck, the std a constant (no
    gradient), then both decoders fuse the skips deepest first; the mean over the passes."""
    padding = ~mask
    torch.manual_seed(seed)
    levels = [tokens]
    for layer in unet.encoder:
        levels.append(layer(levels[-1], src_key_padding_mask=padding))
    deepest = levels[-1]
    noise = torch.randn(copies * B, *tokens.shape[1:]).reshape(copies, *tokens.shape)

    def decode(decoder, hidden):
        for layer, fuse, skip in zip(decoder.layers, decoder.fuse, [levels[2], levels[1]]):
            hidden = fuse(torch.cat([layer(hidden, src_key_padding_mask=padding), skip], -1))
        return hidden

    semantic, modality = [], []
    for k in range(copies):
        perturbed = deepest + noise_std * deepest.detach().std(-1, keepdim=True) * noise[k]
        bottleneck = unet.perturbation(perturbed, src_key_padding_mask=padding)
        semantic.append(decode(unet.semantic_decoder, bottleneck))
        modality.append(decode(unet.modality_decoder, bottleneck))
    keep = mask[..., None].float()
    return torch.stack(semantic).mean(0) * keep, torch.stack(modality).mean(0) * keep


def test_forward_is_the_mean_over_k_perturbed_passes_with_skips_deepest_first():
    unet = make_unet(num_perturbations=3, noise_std=0.5).train()
    tokens, mask = tokens_and_mask(W, {2: 2})
    torch.manual_seed(7)
    output = unet(tokens, mask)
    semantic, modality = reference_forward(unet, tokens, mask, 0.5, 3, seed=7)
    torch.testing.assert_close(output.semantic, semantic)
    torch.testing.assert_close(output.modality, modality)


def test_the_noise_scale_passes_no_gradient_to_the_bottleneck():
    """The noise is ``noise_std · std(H_n)`` times ``ε``, the std a constant of the pass: the
    tokens' gradient is that of a fixed noise added to ``H``, none through its std."""
    unet = make_unet(num_perturbations=2, noise_std=0.5).train()
    tokens, mask = tokens_and_mask(W, {2: 2})
    tokens.requires_grad_()
    probe = torch.randn(2, B, W, D, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(7)
    found = torch.autograd.grad(sum((c * p).sum() for c, p in zip(unet(tokens, mask), probe)),
                                tokens)[0]
    expected = torch.autograd.grad(
        sum((c * p).sum() for c, p in zip(reference_forward(unet, tokens, mask, 0.5, 2, seed=7),
                                          probe)), tokens)[0]
    torch.testing.assert_close(found, expected)


def test_third_decoder_level_skips_from_the_input():
    unet = make_unet(num_encoder_layers=2, num_decoder_layers=3).eval()
    tokens, mask = tokens_and_mask(P, {})
    captured = []
    unet.semantic_decoder.fuse[2].register_forward_hook(
        lambda module, inputs, output: captured.append(inputs[0][..., D:]))
    unet(tokens, mask)
    torch.testing.assert_close(captured[0], tokens)


def test_gradients_reach_every_part():
    unet = make_unet().train()
    tokens, mask = tokens_and_mask(P, {0: 2})
    semantic, modality = unet(tokens, mask)
    (semantic.pow(2).sum() + modality.pow(2).sum()).backward()
    assert all(p.grad is not None for p in unet.parameters())
    for part in (unet.encoder, unet.perturbation, unet.semantic_decoder, unet.modality_decoder):
        assert sum(p.grad.abs().sum() for p in part.parameters()) > 0


def test_lifted_unet_works_at_the_hidden_width_and_returns_the_token_width():
    plain = make_unet()
    assert isinstance(plain.lift, torch.nn.Identity)
    assert isinstance(plain.semantic_decoder.out, torch.nn.Identity)
    unet = make_unet(hidden_dim=2 * D, num_decoder_layers=3).eval()
    assert unet.encoder[0].linear1.in_features == 2 * D
    tokens, mask = tokens_and_mask(P, {0: 3})
    captured = []
    unet.semantic_decoder.fuse[2].register_forward_hook(
        lambda module, inputs, output: captured.append(inputs[0][..., 2 * D:]))
    output = unet(tokens, mask)
    assert output.semantic.shape == output.modality.shape == (B, P, D)
    # The input level's skip is the lifted input, at the hidden width.
    torch.testing.assert_close(captured[0], unet.lift(tokens))
    # Each path ends in its own map back to D: the semantic output is that map of the last fuse.
    fused = []
    unet.semantic_decoder.fuse[2].register_forward_hook(
        lambda module, inputs, output: fused.append(output))
    again = unet(tokens, mask)
    torch.testing.assert_close(again.semantic,
                               unet.semantic_decoder.out(fused[0]) * mask[..., None].float())
    with pytest.raises(ValueError, match='hidden_dim 8 must lift the tokens: at least their '
                                         'width 16'):
        make_unet(hidden_dim=8)


def test_bad_configuration_and_input_are_named():
    with pytest.raises(ValueError, match='num_decoder_layers 4'):
        DualPathUNet(D, num_heads=2, num_encoder_layers=2, num_decoder_layers=4)
    with pytest.raises(ValueError, match='width 16 is not divisible by num_heads 3'):
        DualPathUNet(D, num_heads=3)
    unet = make_unet()
    tokens, mask = tokens_and_mask(P, {1: 0})
    with pytest.raises(ValueError, match=r'samples \[1\] have no real token'):
        unet(tokens, mask)
    with pytest.raises(ValueError, match='width 16, got tokens of width 8'):
        unet(torch.randn(B, P, 8), torch.ones(B, P, dtype=torch.bool))
