"""Related-semantics identification of CDDS (paper §3.2).

Each feature column of the semantic components is treated as a random variable whose samples
are that column's values over the real patches (image) or words (text) of a batch. Two columns
of different modalities are related when their distributions are close:

1. column distributions: a Gaussian ``N(μ_d, σ_d²)`` fitted to each column;
2. correlation ``C_ij = exp(−J_ij)``, ``J_ij = ½ [KL(p_i ‖ q_j) + KL(q_j ‖ p_i)]`` between image
   column ``i`` and text column ``j`` — ``C ∈ (0, 1]^{D_I × D_T}``, 1 for equal laws;
3. an adaptive threshold on the conditional probabilities, per row (``P(j | i)``: text columns
   for image column ``i``) and per column (``P(i | j)``), ``τ = mean + λ · std`` of each row's
   conditionals; the weights are the binary mask ``1[P > τ]`` times the correlation degree,
   renormalised (Eqs. 8-9, ``weighting='mask'``), or the shrinkage ``max(P − τ, 0)``
   renormalised (``weighting='shrinkage'``, differentiable in a learnable ``λ``).

The statistics come from the current batch (``'batch'``), from a random subset of its samples
(``'subset'``), or from a running estimate over the dataset (``'dataset'``) that
:meth:`CDDSColumnCorrelation.update` accumulates and :meth:`~CDDSColumnCorrelation.reset`
clears (paper Table 5). They are statistics of the data, computed without gradient; only ``λ``
of the shrinkage weights learns here (a binary mask has no gradient in ``λ``, which is then a
fixed hyperparameter).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.losses.cdds import check_tokens, gaussian_kl
from xmr.registry import MODELS

#: Where the column statistics come from (paper Table 5).
CORRELATION_MODES = ('batch', 'subset', 'dataset')
#: How the thresholded conditionals become sampling weights.
WEIGHTINGS = ('mask', 'shrinkage')


class CorrelationWeights(NamedTuple):
    """What the correlation hands to the distribution sampler.

    Attributes:
        correlation: ``[D_I, D_T]`` ``C_ij = exp(−J_ij)`` in ``(0, 1]``.
        image_from_text: ``[D_I, D_T]`` sparse weights, row ``i`` sums to 1: the text columns
            that image column ``i`` samples from.
        text_from_image: ``[D_T, D_I]`` sparse weights, row ``j`` sums to 1: the image columns
            that text column ``j`` samples from.
    """

    correlation: torch.Tensor
    image_from_text: torch.Tensor
    text_from_image: torch.Tensor


def column_statistics(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sufficient statistics of each column over the real tokens, in float64.

    Args:
        tokens: ``[B, N, D]``.
        mask: ``[B, N]`` bool.

    Returns:
        ``[3, D]``: token count (the same in every column), sum, sum of squares.
    """
    values = tokens.detach()[mask].double()
    count = torch.full_like(values[0], values.shape[0])
    return torch.stack([count, values.sum(0), (values ** 2).sum(0)])


def gaussian_from_statistics(statistics: torch.Tensor,
                             min_variance: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``[3, D]`` statistics -> mean ``[D]`` and variance ``[D]`` (floored at ``min_variance``)."""
    count, total, squares = statistics
    mean = total / count
    variance = (squares / count - mean ** 2).clamp(min=min_variance)
    return mean, variance


def symmetric_gaussian_kl(image_mean: torch.Tensor, image_var: torch.Tensor,
                          text_mean: torch.Tensor, text_var: torch.Tensor) -> torch.Tensor:
    """Pairwise ``J_ij = ½ [KL(p_i ‖ q_j) + KL(q_j ‖ p_i)]`` between columns.

    Args:
        image_mean, image_var: ``[D_I]`` Gaussian of each image column (``p_i``).
        text_mean, text_var: ``[D_T]`` Gaussian of each text column (``q_j``).

    Returns:
        ``[D_I, D_T]``, non-negative, zero for equal laws; the correlation is ``exp(−J)``.
    """
    p_mean, p_var = image_mean[:, None], image_var[:, None]
    q_mean, q_var = text_mean[None, :], text_var[None, :]
    return (gaussian_kl(p_mean, p_var, q_mean, q_var)
            + gaussian_kl(q_mean, q_var, p_mean, p_var)) / 2


def row_threshold(conditional: torch.Tensor, sparsity: torch.Tensor) -> torch.Tensor:
    """``τ_r = mean_c P_rc + λ · std_c P_rc`` of each row: ``[R, C]`` -> ``[R, 1]``."""
    return conditional.mean(-1, keepdim=True) + sparsity * conditional.std(
        -1, unbiased=False, keepdim=True)


def _kept_or_strongest(kept: torch.Tensor, conditional: torch.Tensor) -> torch.Tensor:
    # A row left empty keeps its largest entry alone, so every column samples from something.
    strongest = F.one_hot(conditional.argmax(-1), conditional.shape[-1]).to(kept.dtype)
    return torch.where(kept.sum(-1, keepdim=True) > 0, kept, strongest)


def masked_correlation(conditional: torch.Tensor, sparsity: torch.Tensor) -> torch.Tensor:
    """The binary mask of the entries above the threshold times the correlation degree (Eqs. 8-9).

    ``w_rc ∝ 1[P_rc > τ_r] · C_rc``, normalised per row. Because ``P_rc = C_rc / Σ_c C_rc``
    differs from ``C_rc`` by a factor constant along the row, the weights are computed as
    ``1[P > τ] · P`` renormalised, which cannot divide by a row of underflowed correlations. A
    row left empty keeps its largest entry alone.

    Args:
        conditional: ``[R, C]`` non-negative, rows sum to 1.
        sparsity: scalar ``λ``; larger keeps fewer entries.

    Returns:
        ``[R, C]`` weights, rows sum to 1.
    """
    mask = (conditional > row_threshold(conditional, sparsity)).to(conditional.dtype)
    kept = _kept_or_strongest(mask * conditional, conditional)
    return kept / kept.sum(-1, keepdim=True)


def soft_threshold(conditional: torch.Tensor, sparsity: torch.Tensor) -> torch.Tensor:
    """Adaptive soft-threshold sparsification of each row of conditional probabilities.

    ``τ_r = mean_c P_rc + λ · std_c P_rc``; ``S_rc = max(P_rc − τ_r, 0)`` keeps the entries above
    the threshold, shrunk by it; the weights are ``S_r / Σ_c S_rc``. A row left empty (``λ`` so
    large that nothing passes) keeps its largest entry alone, so every column always samples
    from something.

    Args:
        conditional: ``[R, C]`` non-negative, rows sum to 1.
        sparsity: scalar ``λ``; larger keeps fewer entries.

    Returns:
        ``[R, C]`` weights, rows sum to 1; differentiable in ``λ``.
    """
    kept = _kept_or_strongest(F.relu(conditional - row_threshold(conditional, sparsity)),
                              conditional)
    return kept / kept.sum(-1, keepdim=True)


@MODELS.register_module()
class CDDSColumnCorrelation(nn.Module):
    """Correlation between image and text feature columns and its sparse sampling weights.

    Args:
        image_dim: ``D_I``, width of the image semantic components.
        text_dim: ``D_T``, width of the text semantic components.
        mode: ``'batch'``, ``'subset'`` or ``'dataset'`` (see the module docstring).
        weighting: ``'mask'`` (the paper's binary mask times the correlation degree; ``λ`` a
            fixed buffer) or ``'shrinkage'`` (soft thresholding; ``λ`` a learnable parameter).
        init_sparsity: ``λ`` (its initial value with ``'shrinkage'``).
        subset_ratio: share of the batch's samples (at least one) whose tokens give the
            statistics in ``'subset'`` mode; the same samples for both modalities.
        min_variance: floor of the column variances.
    """

    def __init__(self, image_dim: int, text_dim: int, mode: str = 'batch',
                 weighting: str = 'mask', init_sparsity: float = 1.0, subset_ratio: float = 0.5,
                 min_variance: float = 1e-6) -> None:
        super().__init__()
        if mode not in CORRELATION_MODES:
            raise ValueError(f"correlation mode '{mode}' is not one of {CORRELATION_MODES}")
        if weighting not in WEIGHTINGS:
            raise ValueError(f"correlation weighting '{weighting}' is not one of {WEIGHTINGS}")
        if not 0 < subset_ratio <= 1:
            raise ValueError(f'subset_ratio must be in (0, 1], got {subset_ratio}')
        if image_dim <= 0 or text_dim <= 0:
            raise ValueError(f'column counts must be positive, got {image_dim}, {text_dim}')
        self.image_dim, self.text_dim = image_dim, text_dim
        self.mode, self.subset_ratio, self.min_variance = mode, subset_ratio, min_variance
        self.weighting = weighting
        sparsity = torch.tensor(float(init_sparsity))
        # Same state-dict key either way; a mask gives λ no gradient, so it is not a parameter
        # (DDP would find it unused).
        if weighting == 'shrinkage':
            self.sparsity = nn.Parameter(sparsity)
        else:
            self.register_buffer('sparsity', sparsity)
        self.register_buffer('image_statistics', torch.zeros(3, image_dim, dtype=torch.float64))
        self.register_buffer('text_statistics', torch.zeros(3, text_dim, dtype=torch.float64))

    @property
    def num_accumulated_tokens(self) -> tuple[int, int]:
        """Image and text tokens in the dataset-level estimate."""
        return int(self.image_statistics[0, 0]), int(self.text_statistics[0, 0])

    def _check(self, image_tokens: torch.Tensor, image_mask: torch.Tensor,
               text_tokens: torch.Tensor, text_mask: torch.Tensor) -> None:
        check_tokens(image_tokens, image_mask, 'image semantic tokens')
        check_tokens(text_tokens, text_mask, 'text semantic tokens')
        if image_tokens.shape[-1] != self.image_dim or text_tokens.shape[-1] != self.text_dim:
            raise ValueError(f'correlation built for {self.image_dim} image and {self.text_dim} '
                             f'text columns, got {image_tokens.shape[-1]} and '
                             f'{text_tokens.shape[-1]}')

    @torch.no_grad()
    def update(self, image_tokens: torch.Tensor, image_mask: torch.Tensor,
               text_tokens: torch.Tensor, text_mask: torch.Tensor) -> None:
        """Add a batch to the dataset-level estimate (``[B, P, D_I]``, ``[B, W, D_T]`` + masks).

        Summing sufficient statistics makes the estimate exact: after a pass over the
        dataset it equals the Gaussians fitted to all of the dataset's tokens at once.
        """
        self._check(image_tokens, image_mask, text_tokens, text_mask)
        self.image_statistics += column_statistics(image_tokens, image_mask)
        self.text_statistics += column_statistics(text_tokens, text_mask)

    def reset(self) -> None:
        """Empty the dataset-level estimate."""
        self.image_statistics.zero_()
        self.text_statistics.zero_()

    def _statistics(self, image_tokens: torch.Tensor, image_mask: torch.Tensor,
                    text_tokens: torch.Tensor,
                    text_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.mode == 'dataset':
            if self.image_statistics[0, 0] == 0 or self.text_statistics[0, 0] == 0:
                raise RuntimeError("correlation mode 'dataset' has no estimate: call update() "
                                   'over the dataset before using it (or after reset())')
            return self.image_statistics, self.text_statistics
        if self.mode == 'subset':
            if image_tokens.shape[0] != text_tokens.shape[0]:
                raise ValueError("correlation mode 'subset' draws the same samples from both "
                                 f'modalities; got {image_tokens.shape[0]} images and '
                                 f'{text_tokens.shape[0]} captions')
            batch = image_tokens.shape[0]
            size = max(1, math.ceil(self.subset_ratio * batch))
            chosen = torch.randperm(batch, device=image_tokens.device)[:size]
            image_tokens, image_mask = image_tokens[chosen], image_mask[chosen]
            text_tokens, text_mask = text_tokens[chosen], text_mask[chosen]
        return (column_statistics(image_tokens, image_mask),
                column_statistics(text_tokens, text_mask))

    def forward(self, image_tokens: torch.Tensor, image_mask: torch.Tensor,
                text_tokens: torch.Tensor, text_mask: torch.Tensor) -> CorrelationWeights:
        """Correlation and sampling weights of a batch.

        Args:
            image_tokens: ``[B, P, D_I]`` image semantic components.
            image_mask: ``[B, P]`` bool.
            text_tokens: ``[B, W, D_T]`` text semantic components.
            text_mask: ``[B, W]`` bool.

        Returns:
            :class:`CorrelationWeights` in the dtype of ``λ``.
        """
        self._check(image_tokens, image_mask, text_tokens, text_mask)
        image_statistics, text_statistics = self._statistics(
            image_tokens, image_mask, text_tokens, text_mask)
        image_mean, image_var = gaussian_from_statistics(image_statistics, self.min_variance)
        text_mean, text_var = gaussian_from_statistics(text_statistics, self.min_variance)
        divergence = symmetric_gaussian_kl(image_mean, image_var, text_mean, text_var)
        divergence = divergence.to(self.sparsity.dtype)
        # P(j | i) = C_ij / Σ_j C_ij with C = exp(−J) is a softmax of −J; written as one it
        # cannot divide by a row of underflowed correlations.
        text_given_image = torch.softmax(-divergence, dim=1)
        image_given_text = torch.softmax(-divergence.t(), dim=1)
        weights = masked_correlation if self.weighting == 'mask' else soft_threshold
        return CorrelationWeights(torch.exp(-divergence),
                                  weights(text_given_image, self.sparsity),
                                  weights(image_given_text, self.sparsity))
