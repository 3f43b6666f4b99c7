"""CDDS loss terms: values by hand, zero (or minimal) on ideal inputs, positive otherwise."""
import math

import pytest
import torch
from torch.distributions import Normal, kl_divergence

import xmr.models.disentanglers.cdds  # noqa: F401  (registers the correlation and sampler)
from xmr.models.losses.cdds import (
    CDDSDistributionSamplingLoss,
    check_tokens,
    gaussian_kl,
    information_integrity_loss,
    modality_consistency_loss,
    patch_word_similarity,
    pooled_similarity,
    semantic_consistency_loss,
    x_semantic_reconstruction_loss,
)
from xmr.models.pooling import masked_token_mean
from xmr.registry import MODELS

B, P, W, D = 4, 7, 5, 16


def masks(patch_padding=None, word_padding=None):
    patch_mask = torch.ones(B, P, dtype=torch.bool)
    word_mask = torch.ones(B, W, dtype=torch.bool)
    for sample, real in (patch_padding or {}).items():
        patch_mask[sample, real:] = False
    for sample, real in (word_padding or {}).items():
        word_mask[sample, real:] = False
    return patch_mask, word_mask


def ideal_pairs():
    """Image b and caption b carry the basis vector e_b in every token; padding is noise."""
    patch_mask, word_mask = masks({0: 3}, {1: 2})
    basis = torch.eye(D)[:B]
    patches = basis[:, None].repeat(1, P, 1)
    words = basis[:, None].repeat(1, W, 1)
    patches[~patch_mask] = torch.randn(int((~patch_mask).sum()), D)
    words[~word_mask] = torch.randn(int((~word_mask).sum()), D)
    return patches, patch_mask, words, word_mask


def test_patch_word_similarity_against_loops():
    generator = torch.Generator().manual_seed(0)
    patches, words = torch.randn(B, P, D, generator=generator), torch.randn(3, W, D,
                                                                            generator=generator)
    patch_mask, _ = masks({2: 2})
    word_mask = torch.ones(3, W, dtype=torch.bool)
    word_mask[1, 3:] = False
    scores = patch_word_similarity(patches, patch_mask, words, word_mask)
    assert scores.shape == (B, 3)
    for i in range(B):
        for t in range(3):
            real_patches = patches[i][patch_mask[i]]
            best = [torch.cosine_similarity(real_patches, word[None], dim=-1).max()
                    for word in words[t][word_mask[t]]]
            torch.testing.assert_close(scores[i, t], torch.stack(best).mean())


def test_patch_word_similarity_of_fp16_tokens_zero_on_padding_is_finite():
    """fp16 autocast on a CPU (loss-scaled AMP): the UNets' components are zero on padding,
    CPU autocast runs the norm in fp16, and fp16 cannot hold normalize's eps (1e-12 rounds to
    0), so a padded token normalised in fp16 is 0/0. One image, patches e_0, e_1 and a padded
    one; one caption, word (3, 4) and a padded one: the word's best patch is e_1, cosine 4/5."""
    patches = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]], dtype=torch.float16,
                           requires_grad=True)
    words = torch.tensor([[[3.0, 4.0], [0.0, 0.0]]], dtype=torch.float16, requires_grad=True)
    with torch.autocast('cpu', dtype=torch.float16):
        scores = patch_word_similarity(patches, torch.tensor([[True, True, False]]), words,
                                       torch.tensor([[True, False]]))
    assert scores.tolist() == [[pytest.approx(0.8, rel=1e-3)]]
    scores.sum().backward()
    assert patches.grad.isfinite().all() and words.grad.isfinite().all()


def test_pooled_similarity_is_cosine_of_masked_means():
    generator = torch.Generator().manual_seed(1)
    patches, words = torch.randn(B, P, D, generator=generator), torch.randn(B, W, D,
                                                                            generator=generator)
    patch_mask, word_mask = masks({1: 1}, {3: 4})
    image = torch.stack([patches[b][patch_mask[b]].mean(0) for b in range(B)])
    text = torch.stack([words[b][word_mask[b]].mean(0) for b in range(B)])
    torch.testing.assert_close(masked_token_mean(patches, patch_mask), image)
    torch.testing.assert_close(pooled_similarity(patches, patch_mask, words, word_mask),
                               torch.cosine_similarity(image[:, None], text[None], dim=-1))


@pytest.mark.parametrize('scoring', ['patch_word', 'pooled'])
def test_semantic_consistency_minimal_on_ideal_pairs_and_larger_when_shuffled(scoring):
    patches, patch_mask, words, word_mask = ideal_pairs()
    # Scores are 1 on the diagonal and 0 elsewhere: L = log(1 + (B−1) e^{−1/τ}).
    for temperature in (1.0, 0.01):
        loss = semantic_consistency_loss(patches, patch_mask, words, word_mask, temperature,
                                         scoring)
        expected = math.log1p((B - 1) * math.exp(-1 / temperature))
        torch.testing.assert_close(loss, torch.tensor(expected))
    assert semantic_consistency_loss(patches, patch_mask, words, word_mask, 0.01, scoring) < 1e-6
    shuffled = semantic_consistency_loss(patches, patch_mask, words.roll(1, 0),
                                         word_mask.roll(1, 0), 0.01, scoring)
    assert shuffled > 50


@pytest.mark.parametrize('scoring', ['patch_word', 'pooled'])
def test_semantic_consistency_is_both_directions_cross_entropy_of_the_scores(scoring):
    """On random tokens the score matrix is not symmetric: image->text and text->image
    differ, and the loss averages the two."""
    generator = torch.Generator().manual_seed(2)
    patches, words = torch.randn(B, P, D, generator=generator), torch.randn(B, W, D,
                                                                            generator=generator)
    patch_mask, word_mask = masks({1: 2}, {2: 3})
    score = patch_word_similarity if scoring == 'patch_word' else pooled_similarity
    logits = score(patches, patch_mask, words, word_mask) / 0.1
    assert not torch.allclose(logits, logits.t())
    labels = torch.arange(B)
    expected = (torch.nn.functional.cross_entropy(logits, labels)
                + torch.nn.functional.cross_entropy(logits.t(), labels)) / 2
    torch.testing.assert_close(
        semantic_consistency_loss(patches, patch_mask, words, word_mask, 0.1, scoring), expected)


def test_the_default_semantic_consistency_temperature_is_0_05():
    """τ = 0.05 (docs/methods/cdds.md), in the function and its module alike."""
    generator = torch.Generator().manual_seed(2)
    patches, words = torch.randn(B, P, D, generator=generator), torch.randn(B, W, D,
                                                                            generator=generator)
    patch_mask, word_mask = masks({1: 2}, {2: 3})
    logits = patch_word_similarity(patches, patch_mask, words, word_mask) / 0.05
    labels = torch.arange(B)
    expected = (torch.nn.functional.cross_entropy(logits, labels)
                + torch.nn.functional.cross_entropy(logits.t(), labels)) / 2
    torch.testing.assert_close(semantic_consistency_loss(patches, patch_mask, words, word_mask),
                               expected)
    torch.testing.assert_close(
        MODELS.build(dict(type='CDDSSemanticConsistencyLoss'))(patches, patch_mask, words,
                                                               word_mask), expected)


def test_modality_consistency_zero_when_every_sample_shares_the_law():
    generator = torch.Generator().manual_seed(2)
    shared = torch.randn(W, D, generator=generator)
    permutations = [torch.randperm(W, generator=generator) for _ in range(B)]
    modality = torch.stack([shared[order] for order in permutations])
    mask = torch.ones(B, W, dtype=torch.bool)
    assert modality_consistency_loss(modality, mask).abs() < 1e-5
    modality[0] += 3.0
    assert modality_consistency_loss(modality, mask) > 0.1


def test_modality_consistency_value_against_torch_distributions():
    generator = torch.Generator().manual_seed(3)
    modality = torch.randn(B, P, D, generator=generator) * torch.arange(1, B + 1)[:, None, None]
    mask, _ = masks({0: 4, 2: 6})
    modality[~mask] = 1e3  # padding must not count
    pooled = modality[mask]
    pooled_law = Normal(pooled.mean(0), pooled.std(0, unbiased=False))
    expected = torch.stack([
        kl_divergence(Normal(modality[b][mask[b]].mean(0),
                             modality[b][mask[b]].std(0, unbiased=False)), pooled_law)
        for b in range(B)]).mean()
    torch.testing.assert_close(modality_consistency_loss(modality, mask), expected)


def test_gaussian_kl_is_zero_for_equal_laws_only():
    assert gaussian_kl(torch.tensor(1.0), torch.tensor(2.0), torch.tensor(1.0),
                       torch.tensor(2.0)) == 0
    assert gaussian_kl(torch.tensor(0.0), torch.tensor(1.0), torch.tensor(1.0),
                       torch.tensor(1.0)) == 0.5


@pytest.mark.parametrize('loss', [information_integrity_loss, x_semantic_reconstruction_loss])
def test_reconstruction_terms_zero_when_parts_add_up_and_mse_otherwise(loss):
    generator = torch.Generator().manual_seed(4)
    tokens = torch.randn(B, P, D, generator=generator)
    part = torch.randn(B, P, D, generator=generator)
    mask, _ = masks({1: 2})
    rest = tokens - part
    rest[~mask] += 50.0  # padding is ignored
    assert loss(part, rest, tokens, mask) < 1e-12
    # Off by 0.5 on every element of the real tokens: mean squared error 0.25.
    torch.testing.assert_close(loss(part + 0.5, rest, tokens, mask), torch.tensor(0.25))


def test_module_forms_are_registered_and_weighted():
    patches, patch_mask, words, word_mask = ideal_pairs()
    sc = MODELS.build(dict(type='CDDSSemanticConsistencyLoss', temperature=1.0, loss_weight=2.0))
    torch.testing.assert_close(
        sc(patches, patch_mask, words, word_mask),
        2 * semantic_consistency_loss(patches, patch_mask, words, word_mask, 1.0))
    mc = MODELS.build(dict(type='CDDSModalityConsistencyLoss', loss_weight=3.0))
    torch.testing.assert_close(mc(words, word_mask),
                               3 * modality_consistency_loss(words, word_mask))
    # ‖(S + M) − X‖² by hand on distinct S, M, X: one tensor in all three hid their order.
    generator = torch.Generator().manual_seed(3)
    semantic, modality, tokens = (torch.randn(B, P, D, generator=generator) for _ in range(3))
    expected = ((semantic + modality - tokens) ** 2)[patch_mask].mean()
    for name in ('CDDSInformationIntegrityLoss', 'CDDSXSemanticReconstructionLoss'):
        module = MODELS.build(dict(type=name, loss_weight=0.5))
        torch.testing.assert_close(module(semantic, modality, tokens, patch_mask),
                                   0.5 * expected)
    with pytest.raises(ValueError, match="scoring 'cls'"):
        MODELS.build(dict(type='CDDSSemanticConsistencyLoss', scoring='cls'))


def test_distribution_sampling_plug_in_loss():
    generator = torch.Generator().manual_seed(5)
    patches = torch.randn(B, P, D, generator=generator, requires_grad=True)
    words = torch.randn(B, W, D, generator=generator, requires_grad=True)
    patch_mask, word_mask = masks({0: 5}, {2: 3})
    plug_in = MODELS.build(dict(type='CDDSDistributionSamplingLoss', dim=D,
                                correlation=dict(weighting='shrinkage', init_sparsity=0.5),
                                temperature=0.1, loss_weight=2.0))
    assert isinstance(plug_in, CDDSDistributionSamplingLoss)
    loss = plug_in(patches, patch_mask, words, word_mask)

    weights = plug_in.correlation(patches, patch_mask, words, word_mask)
    image_x = plug_in.sampler(patches, patch_mask, words, word_mask, weights.image_from_text)
    text_x = plug_in.sampler(words, word_mask, patches, patch_mask, weights.text_from_image)
    expected = (semantic_consistency_loss(patches, patch_mask, text_x, word_mask, 0.1)
                + semantic_consistency_loss(image_x, patch_mask, words, word_mask, 0.1))
    torch.testing.assert_close(loss, expected)

    loss.backward()
    assert plug_in.correlation.sparsity.grad != 0
    assert patches.grad.abs().sum() > 0 and words.grad.abs().sum() > 0


def test_unpaired_batches_are_refused():
    patches, patch_mask, words, word_mask = ideal_pairs()
    with pytest.raises(ValueError, match='paired batches, got 4 images and 3 captions'):
        semantic_consistency_loss(patches, patch_mask, words[:3], word_mask[:3])


def test_a_mask_off_the_host_is_checked_by_shape_alone():
    """A mask on a device is never read back (a wait for the device at every check); its shape
    and dtype are still checked. A meta tensor stands for one: reading it would raise."""
    tokens = torch.empty(2, 3, 4, device='meta')
    check_tokens(tokens, torch.empty(2, 3, dtype=torch.bool, device='meta'), 'patch tokens')
    with pytest.raises(ValueError, match=r'patch tokens mask must be a bool tensor of shape '
                                         r'\(2, 3\)'):
        check_tokens(tokens, torch.empty(2, 4, dtype=torch.bool, device='meta'), 'patch tokens')
    with pytest.raises(ValueError, match=r'patch tokens: samples \[1\] have no real token'):
        check_tokens(torch.zeros(2, 3, 4), torch.tensor([[True, False, False], [False] * 3]),
                     'patch tokens')


def test_modality_consistency_floors_both_variances_at_min_variance():
    """One column. Sample 0 has a single real token (1; variance 0, floored to 0.5), sample 1
    the tokens 0 and 2 (mean 1, variance 1); the batch: 1, 0, 2 (mean 1, variance 2/3)."""
    tokens = torch.tensor([[[1.0], [7.0]], [[0.0], [2.0]]])
    mask = torch.tensor([[True, False], [True, True]])
    kl_0 = 0.5 * (math.log((2 / 3) / 0.5) + 0.5 / (2 / 3) - 1)
    kl_1 = 0.5 * (math.log(2 / 3) + 1 / (2 / 3) - 1)
    loss = modality_consistency_loss(tokens, mask, min_variance=0.5)
    assert loss.item() == pytest.approx((kl_0 + kl_1) / 2, rel=1e-6)
    # A constant component: every variance is the floor, every law the same, no NaN.
    constant = modality_consistency_loss(torch.full((3, 4, 2), 0.25),
                                         torch.ones(3, 4, dtype=torch.bool))
    assert constant.item() == 0.0


def test_a_non_positive_semantic_consistency_temperature_is_refused():
    with pytest.raises(ValueError, match='temperature must be positive, got 0'):
        MODELS.build(dict(type='CDDSSemanticConsistencyLoss', temperature=0.0))


def test_the_functional_semantic_consistency_refuses_what_its_module_refuses():
    """A τ of 0 divided the scores into infinities and a NaN loss; the function, the loss module
    and the disentangler refuse the same settings with the same words."""
    tokens, mask = torch.randn(2, 3, 4), torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match='temperature must be positive, got 0'):
        semantic_consistency_loss(tokens, mask, tokens, mask, temperature=0.0)
    with pytest.raises(ValueError, match="scoring 'cls' is not one of"):
        semantic_consistency_loss(tokens, mask, tokens, mask, scoring='cls')
