"""Packed tokens: a padded text batch's real tokens laid end to end, ``[B, L, D] -> [T, D]``.

Everything in a transformer block except attention acts on each token alone, and those
projections are nearly all of a block's cost at caption lengths. A batch padded to its longest
caption wastes that cost on padding: the bundled synthetic captions average 18 tokens in
batches padded to 47, Multi30K's about 18 in batches padded to 35-46. Run on packed tokens, the
projections, norms and adapters see only the ``T`` real tokens; attention alone goes back to
the padded layout, where the usual mask applies, so every real token's output is the one the
padded batch gives (the same arithmetic; only the order of floating-point sums may differ).
"""
from __future__ import annotations

import torch


class PackedTokens:
    """Where the real tokens of a ``[B, L]`` padded batch sit, and the attention bias to use.

    Args:
        attention_mask: ``[B, L]`` bool, True on real tokens (any pattern, not only right
            padding).
        bias: additive attention bias ``[B, 1, L, L]`` of the padded layout
            (:meth:`~xmr.models.backbones.base.TextTower.build_mask`).

    Attributes:
        index: ``[T]`` flat positions ``b * L + l`` of the real tokens, in batch order.
        sample_index: ``[T]`` the sample ``b`` each packed token belongs to.
    """

    def __init__(self, attention_mask: torch.Tensor, bias: torch.Tensor) -> None:
        self.attention_mask = attention_mask
        self.batch, self.length = attention_mask.shape
        self.index = attention_mask.reshape(-1).nonzero().squeeze(1)
        self.sample_index = torch.div(self.index, self.length, rounding_mode='floor')
        self.bias = bias

    @property
    def num_tokens(self) -> int:
        """``T``, the number of real tokens."""
        return self.index.numel()

    def samples(self, rows: slice) -> tuple[PackedTokens, slice]:
        """The packing of the samples ``rows`` alone, and where their tokens lie in ``[T, D]``.

        Packing keeps batch order, so a contiguous run of samples owns a contiguous run of
        packed tokens, from the count of real tokens before the run to the count through its
        end (both read on the host).
        """
        start, stop, _ = rows.indices(self.batch)
        counts = self.attention_mask[:stop].sum(1)
        tokens = slice(int(counts[:start].sum()), int(counts.sum()))
        return PackedTokens(self.attention_mask[rows], self.bias[rows]), tokens

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, L, ...] -> [T, ...]``: the real tokens only."""
        return x.flatten(0, 1).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """``[T, ...] -> [B, L, ...]``, zeros on the padding (differentiable in ``x``)."""
        rest = x.shape[1:]
        padded = x.new_zeros(self.batch * self.length, *rest)
        return padded.index_copy(0, self.index, x).view(self.batch, self.length, *rest)
