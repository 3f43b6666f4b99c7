"""Related-semantics identification of CDDS: KL correlation, soft threshold, modes."""
import math

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from xmr.models.disentanglers.cdds import (
    CDDSColumnCorrelation,
    column_statistics,
    gaussian_from_statistics,
    masked_correlation,
    soft_threshold,
    symmetric_gaussian_kl,
)
from xmr.registry import MODELS

B, P, W, D = 4, 7, 5, 16


def batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    image = torch.randn(B, P, D, generator=generator) * torch.linspace(0.5, 2, D)
    text = torch.randn(B, W, D, generator=generator) + torch.linspace(-1, 1, D)
    image_mask = torch.ones(B, P, dtype=torch.bool)
    image_mask[0, 4:] = False
    text_mask = torch.ones(B, W, dtype=torch.bool)
    text_mask[2, 1:] = False
    return image, image_mask, text, text_mask


def test_column_gaussians_are_the_masked_moments():
    image, image_mask, _, _ = batch()
    mean, var = gaussian_from_statistics(column_statistics(image, image_mask), 1e-6)
    real = image[image_mask]
    assert real.shape[0] == B * P - 3
    torch.testing.assert_close(mean.float(), real.mean(0))
    torch.testing.assert_close(var.float(), real.var(0, unbiased=False))


def test_symmetric_kl_matches_torch_distributions():
    image_mean, image_var = torch.tensor([0.0, 1.0, -2.0]), torch.tensor([1.0, 0.5, 3.0])
    text_mean, text_var = torch.tensor([0.0, 2.0]), torch.tensor([1.0, 0.25])
    divergence = symmetric_gaussian_kl(image_mean, image_var, text_mean, text_var)
    for i in range(3):
        for j in range(2):
            p = Normal(image_mean[i], image_var[i].sqrt())
            q = Normal(text_mean[j], text_var[j].sqrt())
            expected = (kl_divergence(p, q) + kl_divergence(q, p)) / 2
            torch.testing.assert_close(divergence[i, j], expected)
    assert divergence[0, 0] == 0  # equal laws: correlation exp(0) = 1


def test_soft_threshold_by_hand():
    row = torch.tensor([[0.5, 0.3, 0.1, 0.1]])
    std = math.sqrt((0.25 ** 2 + 0.05 ** 2 + 2 * 0.15 ** 2) / 4)
    # λ = 0: τ = mean = 0.25, kept (0.25, 0.05) -> (5/6, 1/6).
    torch.testing.assert_close(soft_threshold(row, torch.tensor(0.0)),
                               torch.tensor([[5 / 6, 1 / 6, 0.0, 0.0]]))
    # λ = -1: τ = 0.25 - std, every entry passes.
    shrunk = row - (0.25 - std)
    torch.testing.assert_close(soft_threshold(row, torch.tensor(-1.0)), shrunk / shrunk.sum())
    # λ = 1: only the largest passes.
    torch.testing.assert_close(soft_threshold(row, torch.tensor(1.0)),
                               torch.tensor([[1.0, 0.0, 0.0, 0.0]]))


def test_soft_threshold_keeps_the_largest_and_sparsity_moves_the_count():
    conditional = torch.softmax(torch.randn(6, 10, generator=torch.Generator().manual_seed(1)),
                                dim=1)
    counts = []
    for value in torch.linspace(-1.5, 3.0, 10):
        weights = soft_threshold(conditional, value)
        torch.testing.assert_close(weights.sum(1), torch.ones(6))
        kept = weights > 0
        for row in range(6):
            top = conditional[row].topk(int(kept[row].sum())).indices
            assert set(top.tolist()) == set(kept[row].nonzero().flatten().tolist())
            if kept[row].sum() > 1:
                # Weights keep the order of the correlations they came from.
                order = conditional[row][kept[row]].argsort()
                assert (weights[row][kept[row]][order].diff() >= 0).all()
        counts.append(int(kept.sum()))
    assert counts == sorted(counts, reverse=True)
    assert counts[0] > counts[-1] == 6  # a row left empty keeps its largest entry


def test_mask_times_correlation_by_hand():
    row = torch.tensor([[0.5, 0.3, 0.1, 0.1]])
    # λ = 0: τ = 0.25, mask (1, 1, 0, 0), weights ∝ (0.5, 0.3) -> (5/8, 3/8).
    torch.testing.assert_close(masked_correlation(row, torch.tensor(0.0)),
                               torch.tensor([[5 / 8, 3 / 8, 0.0, 0.0]]))
    # λ = -2: τ < 0.1, every entry passes and the weights are the conditionals themselves.
    torch.testing.assert_close(masked_correlation(row, torch.tensor(-2.0)), row)
    # λ = 5: nothing passes, the largest entry is kept alone.
    torch.testing.assert_close(masked_correlation(row, torch.tensor(5.0)),
                               torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    # A uniform row: τ equals every entry and the mask 1[P > τ] is strict, so none passes and
    # the first largest is kept alone.
    torch.testing.assert_close(masked_correlation(torch.full((1, 4), 0.25), torch.tensor(0.0)),
                               torch.tensor([[1.0, 0.0, 0.0, 0.0]]))


def test_the_mask_weighting_is_the_default_and_its_sparsity_a_fixed_buffer():
    image, image_mask, text, text_mask = batch()
    masked = CDDSColumnCorrelation(D, D, init_sparsity=0.5)
    assert 'sparsity' in dict(masked.named_buffers()) and not list(masked.parameters())
    shrinkage = CDDSColumnCorrelation(D, D, weighting='shrinkage', init_sparsity=0.5)
    assert [name for name, _ in shrinkage.named_parameters()] == ['sparsity']
    shrinkage.load_state_dict(masked.state_dict())
    mask_weights = masked(image, image_mask, text, text_mask)
    shrunk_weights = shrinkage(image, image_mask, text, text_mask)
    conditional = mask_weights.correlation / mask_weights.correlation.sum(1, keepdim=True)
    torch.testing.assert_close(mask_weights.image_from_text,
                               masked_correlation(conditional, torch.tensor(0.5)))
    torch.testing.assert_close(shrunk_weights.image_from_text,
                               soft_threshold(conditional, torch.tensor(0.5)))
    with pytest.raises(ValueError, match="weighting 'hard' is not one of"):
        CDDSColumnCorrelation(D, D, weighting='hard')


def test_the_default_sparsity_is_the_configs_lambda_of_one():
    image, image_mask, text, text_mask = batch()
    torch.testing.assert_close(CDDSColumnCorrelation(D, D)(image, image_mask, text, text_mask),
                               CDDSColumnCorrelation(D, D, init_sparsity=1.0)(
                                   image, image_mask, text, text_mask))
    assert not torch.equal(CDDSColumnCorrelation(D, D, init_sparsity=0.5)(
        image, image_mask, text, text_mask).image_from_text,
        CDDSColumnCorrelation(D, D)(image, image_mask, text, text_mask).image_from_text)


@pytest.mark.parametrize('weighting', ['mask', 'shrinkage'])
def test_the_column_statistics_pass_no_gradient_to_the_tokens(weighting):
    """The correlation is a statistic of the data: the weights it hands the sampler train
    ``λ`` of the shrinkage alone, never the semantic tokens they were measured on."""
    image, image_mask, text, text_mask = batch()
    image.requires_grad_()
    text.requires_grad_()
    correlation = CDDSColumnCorrelation(D, D, weighting=weighting, init_sparsity=0.0)
    weights = correlation(image, image_mask, text, text_mask)
    probe = torch.randn(D, D, generator=torch.Generator().manual_seed(1))
    total = sum((w * probe).sum() for w in weights)
    if weighting == 'mask':
        assert not total.requires_grad
        return
    total.backward()
    assert image.grad is None and text.grad is None
    assert correlation.sparsity.grad is not None and correlation.sparsity.grad != 0


def test_sparsity_gets_a_gradient():
    conditional = torch.softmax(torch.randn(5, 8, generator=torch.Generator().manual_seed(2)), 1)
    sparsity = torch.tensor(0.0, requires_grad=True)
    probe = torch.randn(5, 8, generator=torch.Generator().manual_seed(3))
    (soft_threshold(conditional, sparsity) * probe).sum().backward()
    assert sparsity.grad is not None and sparsity.grad != 0


def test_related_columns_are_the_ones_with_matching_distributions():
    generator = torch.Generator().manual_seed(4)
    image_means = torch.tensor([0.0, 10.0, 20.0, 30.0])
    text_means = torch.tensor([30.0, 0.0, 20.0, 10.0])
    image = torch.randn(8, 50, 4, generator=generator) + image_means
    text = torch.randn(8, 40, 4, generator=generator) + text_means
    correlation = CDDSColumnCorrelation(4, 4, init_sparsity=1.0)
    weights = correlation(image, torch.ones(8, 50, dtype=torch.bool), text,
                          torch.ones(8, 40, dtype=torch.bool))
    assert weights.image_from_text.argmax(1).tolist() == [1, 3, 2, 0]
    assert weights.text_from_image.argmax(1).tolist() == [3, 0, 2, 1]
    assert weights.correlation.shape == (4, 4)
    assert (weights.correlation <= 1).all() and (weights.correlation > 0.5).sum() == 4


def test_batch_output_shapes_and_normalisation_for_unequal_widths():
    image, image_mask, text, text_mask = batch()
    correlation = CDDSColumnCorrelation(D, 8)
    weights = correlation(image, image_mask, text[..., :8], text_mask)
    assert weights.image_from_text.shape == (D, 8)
    assert weights.text_from_image.shape == (8, D)
    torch.testing.assert_close(weights.image_from_text.sum(1), torch.ones(D))
    torch.testing.assert_close(weights.text_from_image.sum(1), torch.ones(8))


def test_subset_mode_uses_the_drawn_samples_of_both_modalities():
    image, image_mask, text, text_mask = batch()
    batch_mode = CDDSColumnCorrelation(D, D)
    full = CDDSColumnCorrelation(D, D, mode='subset', subset_ratio=1.0)
    torch.testing.assert_close(full(image, image_mask, text, text_mask),
                               batch_mode(image, image_mask, text, text_mask))
    half = CDDSColumnCorrelation(D, D, mode='subset', subset_ratio=0.5)
    torch.manual_seed(11)
    drawn = half(image, image_mask, text, text_mask)
    torch.manual_seed(11)
    chosen = torch.randperm(B)[:2]
    expected = batch_mode(image[chosen], image_mask[chosen], text[chosen], text_mask[chosen])
    torch.testing.assert_close(drawn, expected)
    # Three samples at ratio 0.5: the subset rounds up, to two.
    torch.manual_seed(12)
    drawn = half(image[:3], image_mask[:3], text[:3], text_mask[:3])
    torch.manual_seed(12)
    chosen = torch.randperm(3)[:2]
    expected = batch_mode(image[chosen], image_mask[chosen], text[chosen], text_mask[chosen])
    torch.testing.assert_close(drawn, expected)


def test_dataset_mode_accumulates_exactly_and_resets():
    image, image_mask, text, text_mask = batch()
    dataset = CDDSColumnCorrelation(D, D, mode='dataset')
    with pytest.raises(RuntimeError, match='call update'):
        dataset(image, image_mask, text, text_mask)
    dataset.update(image[:2], image_mask[:2], text[:2], text_mask[:2])
    dataset.update(image[2:], image_mask[2:], text[2:], text_mask[2:])
    assert dataset.num_accumulated_tokens == (int(image_mask.sum()), int(text_mask.sum()))
    whole = CDDSColumnCorrelation(D, D)(image, image_mask, text, text_mask)
    # The estimate, not the batch it is called with, decides.
    torch.testing.assert_close(dataset(image[:1], image_mask[:1], text[:1], text_mask[:1]), whole)
    restored = CDDSColumnCorrelation(D, D, mode='dataset')
    restored.load_state_dict(dataset.state_dict())
    torch.testing.assert_close(restored(image, image_mask, text, text_mask), whole)
    dataset.reset()
    assert dataset.num_accumulated_tokens == (0, 0)
    with pytest.raises(RuntimeError, match='call update'):
        dataset(image, image_mask, text, text_mask)


def test_registered_and_bad_arguments_named():
    built = MODELS.build(dict(type='CDDSColumnCorrelation', image_dim=D, text_dim=D,
                              mode='subset'))
    assert isinstance(built, CDDSColumnCorrelation)
    with pytest.raises(ValueError, match="mode 'epoch'"):
        CDDSColumnCorrelation(D, D, mode='epoch')
    with pytest.raises(ValueError, match='subset_ratio'):
        CDDSColumnCorrelation(D, D, subset_ratio=0.0)
    with pytest.raises(ValueError, match=r'subset_ratio must be in \(0, 1\], got 1.5'):
        CDDSColumnCorrelation(D, D, subset_ratio=1.5)
    image, image_mask, text, text_mask = batch()
    with pytest.raises(ValueError, match='built for 16 image and 8 text columns'):
        CDDSColumnCorrelation(D, 8)(image, image_mask, text, text_mask)


@pytest.mark.parametrize('sparsity', [0.0, 0.5, 1.0])
def test_both_directions_from_the_raw_tokens_by_the_papers_steps(sparsity):
    """§3.2 written out from the tokens, in float64: Gaussians of the masked columns (biased
    variance), ``J`` by ``torch.distributions``, ``C = exp(−J)``, ``P(j|i)`` per row and
    ``P(i|j)`` per column of ``C``, ``τ = mean + λ·std`` (population std) per row of
    conditionals, ``w ∝ 1[P > τ]·C`` renormalised (Eqs. 8-9)."""
    image, image_mask, text, text_mask = batch(5)
    text = text[..., :6]
    found = CDDSColumnCorrelation(D, 6, init_sparsity=sparsity)(image, image_mask, text,
                                                               text_mask)

    def law(tokens, mask):
        values = tokens[mask].double()
        return Normal(values.mean(0), values.var(0, unbiased=False).sqrt())

    p, q = law(image, image_mask), law(text, text_mask)
    p_i = Normal(p.loc[:, None], p.scale[:, None])
    q_j = Normal(q.loc[None, :], q.scale[None, :])
    divergence = (kl_divergence(p_i, q_j) + kl_divergence(q_j, p_i)) / 2       # [D_I, D_T]
    correlation = torch.exp(-divergence)

    def weights(rows):                                 # rows [R, C] of C_rc, one source each
        conditional = rows / rows.sum(1, keepdim=True)
        tau = conditional.mean(1, keepdim=True) + sparsity * conditional.std(
            1, unbiased=False, keepdim=True)
        kept = (conditional > tau).double() * rows
        return kept / kept.sum(1, keepdim=True)

    torch.testing.assert_close(found.correlation, correlation.float())
    torch.testing.assert_close(found.image_from_text, weights(correlation).float())
    torch.testing.assert_close(found.text_from_image, weights(correlation.t()).float())
