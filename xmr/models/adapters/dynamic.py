"""DASD's dynamic adapter: a bottleneck whose middle matrix is generated for each caption."""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from xmr.models.adapters.base import AdapterContext, AdapterPlacement, AdapterSite, BaseAdapter
from xmr.registry import ADAPTERS


@ADAPTERS.register_module()
class DynamicAdapter(BaseAdapter):
    """``DA(X) = W_up ReLU(W^z W_down X) + X`` after a frozen text block (DASD, "dynamic adapter").

    ``W_down`` / ``W_up`` belong to one language and one block; ``W^z`` is generated per caption
    by the shared :class:`~xmr.models.disentanglers.ParameterGenerator` of the
    disentangler and arrives in ``ctx.condition`` as ``{block_index: [B, d_u, d_u]}``. With
    ``W^z = I`` the adapter is a static bottleneck adapter of width ``d_u``.

    The paper's site is after the block (the default). On a post-LN tower (BERT, CCLM) that is
    after the block's LayerNorm, where a short high-rate phase collapses to the teacher's mean
    embedding; ``sites=['mlp.output']`` puts it before ``LN(x + h)`` instead
    (docs/methods/text_teacher.md).

    Args:
        placement: where the instance sits (:class:`AdapterPlacement`).
        hidden: bottleneck width ``d_u`` (32); must equal the generator's ``d_u``.
    """

    sites = (AdapterSite.BLOCK_OUTPUT, AdapterSite.MLP_OUTPUT)
    accepts_packed_tokens = True
    reads_condition = True

    def __init__(self, placement: AdapterPlacement, hidden: int = 32) -> None:
        super().__init__(placement)
        width = self.width
        self.hidden = hidden
        self.down = nn.Linear(width, hidden)
        self.up = nn.Linear(hidden, width)

    def middle_matrix(self, ctx: AdapterContext, batch: int) -> torch.Tensor:
        """This block's ``W^z`` ``[B, d_u, d_u]`` from the context, checked."""
        condition = ctx.condition
        if not isinstance(condition, Mapping):
            raise ValueError(
                f'DynamicAdapter at block {self.block_index} needs per-caption W^z in '
                f'ctx.condition, got {type(condition).__name__}; configure a disentangler with '
                "a parameter generator (type='SemanticsDisentangler')")
        if self.block_index not in condition:
            raise KeyError(f'DynamicAdapter at block {self.block_index}: the generator makes W^z '
                           f'for blocks {sorted(condition)} only; set the generator blocks to '
                           'the dynamic adapters\' blocks')
        matrix = condition[self.block_index]
        if tuple(matrix.shape) != (batch, self.hidden, self.hidden):
            raise ValueError(f'DynamicAdapter at block {self.block_index} (d_u={self.hidden}, '
                             f'batch {batch}) got W^z of shape {tuple(matrix.shape)}; the '
                             "generator's d_u must equal the adapter's hidden")
        return matrix

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        """``[B, L, D] -> [B, L, D]`` (or packed ``[T, D] -> [T, D]``), one ``W^z`` per sample.

        Packed tokens go back to ``[B, L, d_u]`` for the batched product with the ``B``
        matrices: only the ``d_u``-wide bottleneck is unpacked.
        """
        packed = ctx.packed
        h = self.down(x)
        matrix = self.middle_matrix(ctx, packed.batch if packed is not None else x.shape[0])
        if packed is not None:
            h = packed.unpack(h)
        # Tokens are rows here, so W^z h (h a column) is h^T W^zT.
        h = torch.matmul(h, matrix.transpose(1, 2).to(h.dtype))
        if packed is not None:
            h = packed.pack(h)
        return x + self.up(torch.relu(h))
