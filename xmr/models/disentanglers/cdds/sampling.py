"""Distribution sampling of CDDS (paper §3.3): x-semantic components by quantile matching.

For a source column ``i`` (e.g. an image column) and its related target columns ``j`` (text
columns, with weights ``w_ij`` from the correlation), every source token keeps its *rank* in
column ``i`` and takes the value found at the same quantile of the target columns:

``x̂_n,i = Σ_j w_ij · Q_j(F_i(x_n,i))``

with ``F_i`` the empirical CDF of column ``i`` over the batch's real source tokens (mid-rank,
``(r + ½) / N_s``) and ``Q_j`` the empirical quantile function of column ``j`` over the real
target tokens (linear interpolation between order statistics). A weighted mean of 1-D quantile
functions is the quantile function of the Wasserstein-2 barycentre of those distributions, so
the x-semantic column follows a proper law, that barycentre (not the related columns'
mixture: of N(-5, 1) and N(5, 1) at weight ½ each it is N(0, 1)), while the tokens
keep their order: the result lies in the other modality's value distribution and still says
which token is which. Mapped back onto the source tokens, the columns form the x-semantic
component ``[B, N_s, D_s]``. Sampling a distribution from itself returns the original values.

Gradients reach the target values (the order statistics are gathered from them) and the
weights; ranks are piecewise constant, so the source side is trained through the companion
term in which it is the target.
"""
from __future__ import annotations

import torch
from torch import nn

from xmr.models.losses.cdds import check_tokens
from xmr.registry import MODELS


def quantile_match(source_values: torch.Tensor, target_values: torch.Tensor,
                   weights: torch.Tensor) -> torch.Tensor:
    """Quantile-matched sampling of weighted target columns at the source tokens' ranks.

    Args:
        source_values: ``[N_s, D_s]`` values of the real source tokens.
        target_values: ``[N_t, D_t]`` values of the real target tokens.
        weights: ``[D_s, D_t]`` rows sum to 1: which target columns each source column uses.

    Returns:
        ``[N_s, D_s]`` x-semantic values.
    """
    num_source, num_target = source_values.shape[0], target_values.shape[0]
    ranks = source_values.argsort(dim=0, stable=True).argsort(dim=0, stable=True)
    # Mid-rank quantile (r + ½)/N_s read at position q·N_t − ½ of the sorted target: with
    # N_s = N_t this is exactly r, which makes self-sampling the identity. Positions are index
    # arithmetic, in fp32 (or fp64 tokens' dtype) whatever the tokens': fp16 and bf16 hold no
    # rank of a batch's 12,544 patches exactly, fp16 overflows on r·N_t (every rank past a few
    # read the last order statistic) and bf16 rounds a clamp at N_t − 1 up to N_t.
    position_dtype = torch.promote_types(target_values.dtype, torch.float32)
    position = (ranks.to(position_dtype) + 0.5) * (num_target / num_source) - 0.5
    position = position.clamp(0, num_target - 1)
    lower = position.floor().long()
    upper = (lower + 1).clamp(max=num_target - 1)
    fraction = position - lower.to(position.dtype)
    # The interpolation positions depend on the source column only, so the weighted sum over
    # target columns can be taken first on the order statistics: one [N_t, D_t] × [D_t, D_s]
    # product instead of D_s × D_t separate look-ups.
    mixture = target_values.sort(dim=0).values @ weights.t().to(target_values.dtype)
    # Under autocast the product comes out in the autocast dtype, and lerp takes one dtype.
    return torch.lerp(mixture.gather(0, lower), mixture.gather(0, upper),
                      fraction.to(mixture.dtype))


@MODELS.register_module()
class CDDSDistributionSampler(nn.Module):
    """Builds the x-semantic components of one modality from the other's distributions."""

    def forward(self, source_tokens: torch.Tensor, source_mask: torch.Tensor,
                target_tokens: torch.Tensor, target_mask: torch.Tensor,
                weights: torch.Tensor) -> torch.Tensor:
        """x-semantic tokens of the source modality.

        Args:
            source_tokens: ``[B, N_s, D_s]`` semantic components whose tokens are re-expressed.
            source_mask: ``[B, N_s]`` bool.
            target_tokens: ``[B', N_t, D_t]`` semantic components of the other modality.
            target_mask: ``[B', N_t]`` bool.
            weights: ``[D_s, D_t]`` sampling weights (rows sum to 1).

        Returns:
            ``[B, N_s, D_s]``, zero on padding.
        """
        check_tokens(source_tokens, source_mask, 'source tokens')
        check_tokens(target_tokens, target_mask, 'target tokens')
        expected = (source_tokens.shape[-1], target_tokens.shape[-1])
        if tuple(weights.shape) != expected:
            raise ValueError(f'sampling weights must be [D_source, D_target] = {list(expected)}, '
                             f'got {list(weights.shape)}')
        values = quantile_match(source_tokens[source_mask], target_tokens[target_mask], weights)
        sampled = values.new_zeros(*source_tokens.shape[:2], values.shape[-1])
        sampled[source_mask] = values
        return sampled
