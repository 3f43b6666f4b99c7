"""Distribution sampling of CDDS: quantile matching and the x-semantic tokens."""
import pytest
import torch

from xmr.models.disentanglers.cdds import CDDSDistributionSampler, quantile_match
from xmr.registry import MODELS

B, P, W, D = 4, 7, 5, 16


def reference_quantile_match(source, target, weights):
    """Column by column, token by token: rank, quantile, interpolated order statistic."""
    num_source, num_target = source.shape[0], target.shape[0]
    result = torch.zeros(num_source, source.shape[1], dtype=torch.float64)
    for i in range(source.shape[1]):
        for n in range(num_source):
            value = source[n, i]
            rank = int((source[:, i] < value).sum() + (source[:n, i] == value).sum())
            position = min(max((rank + 0.5) / num_source * num_target - 0.5, 0.0),
                           num_target - 1.0)
            low = int(position)
            high = min(low + 1, num_target - 1)
            for j in range(target.shape[1]):
                ordered = target[:, j].double().sort().values
                sample = ordered[low] + (position - low) * (ordered[high] - ordered[low])
                result[n, i] += weights[i, j] * sample
    return result.float()


def test_by_hand():
    source = torch.tensor([[2.0], [3.0], [1.0]])
    target = torch.tensor([[40.0], [10.0], [30.0], [20.0]])
    sampled = quantile_match(source, target, torch.ones(1, 1))
    # quantiles 1/2, 5/6, 1/6 read at positions 1.5, 17/6, 1/6 of (10, 20, 30, 40)
    torch.testing.assert_close(sampled, torch.tensor([[25.0], [30 + 10 * 5 / 6], [10 + 10 / 6]]))


def test_sampling_a_distribution_from_itself_returns_the_original_values():
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randn(B, P, D, generator=generator)
    tokens[1, 2] = tokens[0, 0]  # ties
    mask = torch.ones(B, P, dtype=torch.bool)
    mask[2, 3:] = False
    sampled = CDDSDistributionSampler()(tokens, mask, tokens, mask, torch.eye(D))
    assert torch.equal(sampled[mask], tokens[mask])
    assert (sampled[~mask] == 0).all()


def test_matches_an_independent_reference_for_unequal_counts_and_mixed_weights():
    generator = torch.Generator().manual_seed(1)
    source = torch.randn(9, 3, generator=generator)
    target = torch.randn(6, 4, generator=generator) * 3 + 1
    weights = torch.softmax(torch.randn(3, 4, generator=generator), 1)
    torch.testing.assert_close(quantile_match(source, target, weights),
                               reference_quantile_match(source, target, weights))


def test_samples_under_bf16_autocast_as_training_with_amp_does():
    """``tools/train.py --amp``: the weighted product comes out in bf16, the interpolation
    fractions of fp32 tokens in fp32."""
    generator = torch.Generator().manual_seed(1)
    source = torch.randn(9, 3, generator=generator)
    target = torch.randn(6, 4, generator=generator) * 3 + 1
    weights = torch.softmax(torch.randn(3, 4, generator=generator), 1)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        sampled = quantile_match(source, target, weights)
    torch.testing.assert_close(sampled.float(), reference_quantile_match(source, target, weights),
                               rtol=0.02, atol=0.05)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_half_tokens_of_a_real_batch_sample_at_exact_positions(dtype):
    """Tokens in fp16 / bf16 (a backbone's under ``--amp`` on a GPU) as many as a batch of 64
    ViT-B/16 images has patches (12,544): every rank and position is read exactly. In the
    tokens' dtype fp16 overflowed on ``r·N_t`` and bf16 rounded the clamp at ``N_t − 1`` up to
    an index past the end."""
    generator = torch.Generator().manual_seed(5)
    patches = torch.randn(12544, 2, generator=generator).to(dtype)
    words = (torch.randn(700, 2, generator=generator) * 2 + 1).to(dtype)
    # Sampled from itself, a column gives back its own values, bit for bit.
    assert torch.equal(quantile_match(patches, patches, torch.eye(2)), patches)
    # Other counts: the positions of the fp64 computation on the same values; what is left is
    # the rounding of the interpolated result to the tokens' dtype.
    weights = torch.tensor([[0.25, 0.75], [1.0, 0.0]])
    for source, target in ((patches, words), (words, patches)):
        exact = quantile_match(source.double(), target.double(), weights.double())
        torch.testing.assert_close(quantile_match(source, target, weights).double(), exact,
                                   rtol=torch.finfo(dtype).eps, atol=torch.finfo(dtype).eps)


def test_keeps_the_order_of_the_source_tokens():
    generator = torch.Generator().manual_seed(2)
    source = torch.randn(20, 2, generator=generator)
    target = torch.randn(13, 2, generator=generator)
    sampled = quantile_match(source, target, torch.tensor([[0.3, 0.7], [1.0, 0.0]]))
    for column in range(2):
        order = source[:, column].argsort()
        assert (sampled[order, column].diff() >= 0).all()
    assert sampled[:, 1].min() >= target[:, 0].min() and sampled[:, 1].max() <= target[:, 0].max()


def test_x_semantic_tokens_for_unequal_patch_and_word_counts():
    generator = torch.Generator().manual_seed(3)
    patches, words = torch.randn(B, P, D, generator=generator), torch.randn(B, W, D,
                                                                            generator=generator)
    patch_mask = torch.ones(B, P, dtype=torch.bool)
    patch_mask[0, 5:] = False
    word_mask = torch.ones(B, W, dtype=torch.bool)
    word_mask[3, 2:] = False
    weights = torch.softmax(torch.randn(D, D, generator=generator), 1).requires_grad_()
    words.requires_grad_()
    sampler = MODELS.build(dict(type='CDDSDistributionSampler'))
    image_x = sampler(patches, patch_mask, words, word_mask, weights)
    assert image_x.shape == (B, P, D) and (image_x[~patch_mask] == 0).all()
    torch.testing.assert_close(
        image_x[patch_mask],
        reference_quantile_match(patches[patch_mask], words[word_mask].detach(),
                                 weights.detach()))
    image_x.pow(2).sum().backward()
    assert words.grad[word_mask].abs().sum() > 0 and (words.grad[~word_mask] == 0).all()
    assert weights.grad.abs().sum() > 0


def test_wrong_weights_are_named():
    tokens, mask = torch.randn(B, P, D), torch.ones(B, P, dtype=torch.bool)
    with pytest.raises(ValueError, match=r'\[D_source, D_target\] = \[16, 16\], got \[16, 8\]'):
        CDDSDistributionSampler()(tokens, mask, tokens, mask, torch.ones(D, 8) / 8)


def test_weights_of_another_shape_than_source_by_target_columns_are_refused():
    """``[D_target, D_source]`` weights hold as many numbers as the right ones: refused all
    the same, not read as the wrong columns."""
    generator = torch.Generator().manual_seed(0)
    source, target = torch.randn(B, P, 6, generator=generator), torch.randn(B, W, 4,
                                                                           generator=generator)
    source_mask = torch.ones(B, P, dtype=torch.bool)
    target_mask = torch.ones(B, W, dtype=torch.bool)
    weights = torch.full((4, 6), 1 / 6)
    with pytest.raises(ValueError, match=r'sampling weights must be \[D_source, D_target\] = '
                                         r'\[6, 4\], got \[4, 6\]'):
        CDDSDistributionSampler()(source, source_mask, target, target_mask, weights)
    sampled = CDDSDistributionSampler()(source, source_mask, target, target_mask,
                                        torch.full((6, 4), 1 / 4))
    assert sampled.shape == (B, P, 6)
