"""CDDS disentangler: outputs, loss weights, constraint switches, gradients, inference."""
import pytest
import torch

from xmr.models.disentanglers.cdds import CDDSDisentangler, CorrelationWeights
from xmr.models.losses.cdds import (
    information_integrity_loss,
    modality_consistency_loss,
    semantic_consistency_loss,
    x_semantic_reconstruction_loss,
)
from xmr.models.pooling import masked_token_mean
from xmr.registry import DISENTANGLERS

B, P, W, D = 4, 7, 5, 16
ALL_LOSSES = {'loss_semantic_consistency', 'loss_modality_consistency',
              'loss_information_integrity', 'loss_x_semantic_reconstruction'}


def inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    patches = torch.randn(B, P, D, generator=generator)
    words = torch.randn(B, W, D, generator=generator)
    patch_mask = torch.ones(B, P, dtype=torch.bool)
    patch_mask[0, 4:] = False
    word_mask = torch.ones(B, W, dtype=torch.bool)
    word_mask[2, 2:] = False
    return patches, patch_mask, words, word_mask


def build(**kwargs) -> CDDSDisentangler:
    torch.manual_seed(0)
    config = dict(type='CDDSDisentangler', dim=D, num_heads=2, noise_std=0.0)
    config.update(kwargs)
    return DISENTANGLERS.build(config)


def test_outputs_for_unequal_patch_and_word_counts():
    model = build(noise_std=0.1)
    out = model(*inputs())
    for key in ('image_semantic', 'image_modality', 'image_x_semantic'):
        assert out[key].shape == (B, P, D)
    for key in ('text_semantic', 'text_modality', 'text_x_semantic'):
        assert out[key].shape == (B, W, D)
    assert isinstance(out['correlation'], CorrelationWeights)
    assert set(out['losses']) == ALL_LOSSES
    assert all(torch.isfinite(v) and v > 0 for v in out['losses'].values())


def test_losses_are_the_weighted_terms_on_the_returned_components():
    model = build(alpha_s=2.0, alpha_m=0.3, alpha_f=0.8, temperature=0.1)
    patches, patch_mask, words, word_mask = inputs()
    out = model(patches, patch_mask, words, word_mask)
    si, mi, xi = out['image_semantic'], out['image_modality'], out['image_x_semantic']
    st, mt, xt = out['text_semantic'], out['text_modality'], out['text_x_semantic']
    expected = {
        'loss_semantic_consistency': 2.0 * (
            semantic_consistency_loss(si, patch_mask, xt, word_mask, 0.1)
            + semantic_consistency_loss(xi, patch_mask, st, word_mask, 0.1)) / 2,
        'loss_modality_consistency': 0.3 * (modality_consistency_loss(mi, patch_mask)
                                            + modality_consistency_loss(mt, word_mask)) / 2,
        'loss_information_integrity': 0.8 * (
            information_integrity_loss(si, mi, patches, patch_mask)
            + information_integrity_loss(st, mt, words, word_mask)) / 2,
        'loss_x_semantic_reconstruction': 0.2 * (
            x_semantic_reconstruction_loss(xi, mi, patches, patch_mask)
            + x_semantic_reconstruction_loss(xt, mt, words, word_mask)) / 2,
    }
    for name, value in expected.items():
        torch.testing.assert_close(out['losses'][name], value)


def test_reconstructions_weigh_the_components_by_learned_scalars_eq14():
    """``‖w_s S + w_m M − X‖²`` (and with ``Ŝ``), one ``(w_s, w_m)`` per modality; they start
    at 1 (the plain sums), receive gradients, and ``False`` keeps them fixed at 1."""
    patches, patch_mask, words, word_mask = inputs()
    fixed = build(learned_reconstruction_weights=False)
    learned = build()
    assert fixed.reconstruction_weights is None
    torch.testing.assert_close(learned(*inputs())['losses'], fixed(*inputs())['losses'])

    with torch.no_grad():
        learned.reconstruction_weights['image'].copy_(torch.tensor([0.5, 2.0]))
        learned.reconstruction_weights['text'].copy_(torch.tensor([3.0, -1.0]))
    out = learned(patches, patch_mask, words, word_mask)

    def by_hand(component, modality, tokens, mask, w_s, w_m):
        return ((w_s * component + w_m * modality - tokens) ** 2)[mask].mean()

    si, mi, xi = out['image_semantic'], out['image_modality'], out['image_x_semantic']
    st, mt, xt = out['text_semantic'], out['text_modality'], out['text_x_semantic']
    torch.testing.assert_close(out['losses']['loss_information_integrity'], 0.5 * (
        by_hand(si, mi, patches, patch_mask, 0.5, 2.0)
        + by_hand(st, mt, words, word_mask, 3.0, -1.0)) / 2)
    torch.testing.assert_close(out['losses']['loss_x_semantic_reconstruction'], 0.5 * (
        by_hand(xi, mi, patches, patch_mask, 0.5, 2.0)
        + by_hand(xt, mt, words, word_mask, 3.0, -1.0)) / 2)
    out['losses']['loss_information_integrity'].backward()
    assert all(w.grad.abs().min() > 0 for w in learned.reconstruction_weights.values())
    assert build(use_information_integrity=False).reconstruction_weights is None


@pytest.mark.parametrize('switch,removed', [
    ('use_semantic_consistency', {'loss_semantic_consistency'}),
    ('use_modality_consistency', {'loss_modality_consistency'}),
    ('use_information_integrity', {'loss_information_integrity',
                                   'loss_x_semantic_reconstruction'}),
    ('use_distribution_sampling', {'loss_x_semantic_reconstruction'}),
])
def test_each_constraint_can_be_removed(switch, removed):
    model = build(**{switch: False})
    out = model(*inputs())
    assert set(out['losses']) == ALL_LOSSES - removed
    assert model.loss_names == {name.removeprefix('loss_') for name in ALL_LOSSES - removed}


def test_tokens_are_a_fixed_reconstruction_target():
    model = build(use_semantic_consistency=False, use_modality_consistency=False,
                  use_distribution_sampling=False)
    patches, patch_mask, words, word_mask = inputs()
    patches.requires_grad_(True)
    out = model(patches, patch_mask, words, word_mask)
    grad, = torch.autograd.grad(out['losses']['loss_information_integrity'], patches,
                                retain_graph=True)
    # The gradient reaches the tokens through the components only, not through the target.
    through_components = 0.5 * (
        information_integrity_loss(out['image_semantic'], out['image_modality'],
                                   patches.detach(), patch_mask)
        + information_integrity_loss(out['text_semantic'], out['text_modality'], words,
                                     word_mask)) / 2
    expected, = torch.autograd.grad(through_components, patches)
    torch.testing.assert_close(grad, expected)
    assert grad.abs().sum() > 0


def test_without_distribution_sampling_semantics_are_contrasted_directly():
    model = build(use_distribution_sampling=False)
    assert not hasattr(model, 'correlation')
    patches, patch_mask, words, word_mask = inputs()
    out = model(patches, patch_mask, words, word_mask)
    assert not {'image_x_semantic', 'text_x_semantic', 'correlation'} & set(out)
    torch.testing.assert_close(
        out['losses']['loss_semantic_consistency'],
        semantic_consistency_loss(out['image_semantic'], patch_mask, out['text_semantic'],
                                  word_mask, 0.05))
    with pytest.raises(RuntimeError, match='no distribution sampling'):
        model.update_correlation(patches, patch_mask, words, word_mask)


def test_the_x_semantics_sample_each_modality_s_semantics_into_the_other_s():
    """The correlation reads the semantic components (not the modality ones), and each
    modality's semantics are sampled into the other's columns by its own direction's weights."""
    model = build()
    patches, patch_mask, words, word_mask = inputs()
    out = model(patches, patch_mask, words, word_mask)
    si, st = out['image_semantic'], out['text_semantic']
    weights = model.correlation(si, patch_mask, st, word_mask)
    for got, expected in zip(out['correlation'], weights):
        torch.testing.assert_close(got, expected)
    # The two directions differ, so a swap of them (or of a source) would show.
    assert not torch.allclose(weights.image_from_text, weights.text_from_image.T, atol=1e-3)
    torch.testing.assert_close(out['image_x_semantic'],
                               model.sampler(si, patch_mask, st, word_mask,
                                             weights.image_from_text))
    torch.testing.assert_close(out['text_x_semantic'],
                               model.sampler(st, word_mask, si, patch_mask,
                                             weights.text_from_image))


@pytest.mark.parametrize('weighting', ['mask', 'shrinkage'])
def test_the_column_statistics_carry_no_gradient_into_the_unets(weighting):
    model = build(correlation=dict(weighting=weighting, init_sparsity=0.0))
    out = model(*inputs())
    weights = out['correlation']
    assert not weights.correlation.requires_grad
    if weighting == 'mask':
        assert not weights.image_from_text.requires_grad
        return
    (weights.image_from_text.sum() + (weights.text_from_image ** 2).sum()).backward()
    assert all(p.grad is None for unet in (model.image_unet, model.text_unet)
               for p in unet.parameters())
    assert model.correlation.sparsity.grad is not None


def test_gradients_reach_both_unets_and_the_sparsity():
    model = build(noise_std=0.1, correlation=dict(weighting='shrinkage', init_sparsity=0.0))
    out = model(*inputs())
    sum(out['losses'].values()).backward()
    for unet in (model.image_unet, model.text_unet):
        assert all(p.grad is not None for p in unet.parameters())
        for part in (unet.encoder, unet.perturbation, unet.semantic_decoder,
                     unet.modality_decoder):
            assert sum(p.grad.abs().sum() for p in part.parameters()) > 0
    assert model.correlation.sparsity.grad is not None
    assert model.correlation.sparsity.grad != 0


def test_inference_uses_semantic_components_only():
    model = build(noise_std=0.1).eval()
    patches, patch_mask, words, word_mask = inputs()
    out = model(patches, patch_mask, words, word_mask)
    torch.testing.assert_close(model.encode_image(patches, patch_mask), out['image_semantic'])
    torch.testing.assert_close(model.encode_text(words, word_mask), out['text_semantic'])
    torch.testing.assert_close(model.embed_image(patches, patch_mask),
                               masked_token_mean(out['image_semantic'], patch_mask))
    first = build(pooling='first').eval()
    torch.testing.assert_close(first.embed_text(words, word_mask),
                               first.encode_text(words, word_mask)[:, 0])


def test_dataset_level_correlation_through_the_disentangler():
    model = build(correlation=dict(mode='dataset'))
    patches, patch_mask, words, word_mask = inputs()
    with pytest.raises(RuntimeError, match='call update'):
        model(patches, patch_mask, words, word_mask)
    model.update_correlation(patches, patch_mask, words, word_mask)
    assert model.correlation.num_accumulated_tokens == (int(patch_mask.sum()),
                                                        int(word_mask.sum()))
    assert set(model(patches, patch_mask, words, word_mask)['losses']) == ALL_LOSSES


def test_only_a_dataset_level_correlation_is_estimated_before_a_phase():
    """The runner fills what ``dataset_correlation`` returns over the training set; a batch or
    subset correlation is measured on each batch and has no estimate to fill."""
    dataset = build(correlation=dict(mode='dataset'))
    assert dataset.dataset_correlation() is dataset.correlation
    for mode in ('batch', 'subset'):
        assert build(correlation=dict(mode=mode)).dataset_correlation() is None
    assert build(use_distribution_sampling=False).dataset_correlation() is None


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='alpha_f must be in'):
        build(alpha_f=1.5)
    for alphas in (dict(alpha_s=-0.5), dict(alpha_m=-0.5)):
        with pytest.raises(ValueError, match='alpha_s and alpha_m must be non-negative'):
            build(**alphas)
    with pytest.raises(ValueError, match="pooling 'cls'"):
        build(pooling='cls')
    # Refused as built, not at the first step's semantic consistency loss.
    with pytest.raises(ValueError, match='^temperature must be positive, got 0.0$'):
        build(temperature=0.0)
    with pytest.raises(ValueError, match="^scoring 'cosine' is not one of"):
        build(scoring='cosine')
    with pytest.raises(ValueError, match=r"use_distribution_sampling=False removes the column "
                                         r"correlation that correlation=\{'mode': 'dataset'\}"):
        build(use_distribution_sampling=False, correlation=dict(mode='dataset'))
    patches, patch_mask, words, word_mask = inputs()
    with pytest.raises(ValueError, match='paired batches, got 4 images and 3 captions'):
        build()(patches, patch_mask, words[:3], word_mask[:3])


def _reached(model, loss) -> set[str]:
    """``'<modality>.<part>'`` of the UNet parts that get a non-zero gradient from ``loss``."""
    model.zero_grad(set_to_none=True)
    loss.backward(retain_graph=True)
    reached = set()
    for modality in ('image', 'text'):
        unet = getattr(model, f'{modality}_unet')
        for part in ('encoder', 'perturbation', 'semantic_decoder', 'modality_decoder'):
            grads = [p.grad for p in getattr(unet, part).parameters() if p.grad is not None]
            if grads and sum(g.abs().sum() for g in grads) > 0:
                reached.add(f'{modality}.{part}')
    return reached


def test_each_term_trains_the_components_it_constrains():
    """``L_m`` the modality paths, ``L_s`` the semantic paths; the shared encoder and
    perturbation layer of both. Through distribution sampling, ``NCE(S_I, Ŝ_T)`` trains the
    image UNet alone (``Ŝ_T`` is made of ``S_I``'s order statistics at ``S_T``'s ranks, which
    carry no gradient) and ``NCE(Ŝ_I, S_T)`` the text UNet alone."""
    model = build(noise_std=0.1)
    patches, patch_mask, words, word_mask = inputs()
    out = model(patches, patch_mask, words, word_mask)
    shared = {f'{m}.{p}' for m in ('image', 'text') for p in ('encoder', 'perturbation')}
    assert _reached(model, out['losses']['loss_modality_consistency']) == shared | {
        'image.modality_decoder', 'text.modality_decoder'}
    assert _reached(model, out['losses']['loss_semantic_consistency']) == shared | {
        'image.semantic_decoder', 'text.semantic_decoder'}
    image_term = semantic_consistency_loss(out['image_semantic'], patch_mask,
                                           out['text_x_semantic'], word_mask, 0.05)
    assert _reached(model, image_term) == {'image.encoder', 'image.perturbation',
                                           'image.semantic_decoder'}
    text_term = semantic_consistency_loss(out['image_x_semantic'], patch_mask,
                                          out['text_semantic'], word_mask, 0.05)
    assert _reached(model, text_term) == {'text.encoder', 'text.perturbation',
                                          'text.semantic_decoder'}
