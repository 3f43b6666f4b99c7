"""DASD's dynamic adapter: a bottleneck whose middle matrix is generated for each caption."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.adapters.base import AdapterContext, AdapterPlacement, AdapterSite
from xmr.models.adapters.grouped import GroupedAdapter, spread
from xmr.registry import ADAPTERS
from xmr.utils.cli import UserKeyError


@ADAPTERS.register_module()
class DynamicAdapter(GroupedAdapter):
    """``DA(X) = W_up ReLU(W^z W_down X) + X`` after a frozen text block (DASD, "dynamic adapter").

    ``W_down`` / ``W_up`` belong to one language and one block; ``W^z`` is generated per caption
    by the shared :class:`~xmr.models.disentanglers.ParameterGenerator` of the
    disentangler and arrives in ``ctx.condition`` as ``{block_index: [B, d_u, d_u]}``. With
    ``W^z = I`` the adapter is a static bottleneck adapter of width ``d_u``.

    The paper's site is after the block (the default). On a post-LN tower (BERT, CCLM) that is
    after the block's LayerNorm, where a short high-rate phase collapses to the teacher's mean
    embedding; ``sites=['mlp.output']`` puts it before ``LN(x + h)`` instead
    (docs/methods/text_teacher.md).

    In a mixed-language batch every language's adapter at a block runs in one call
    (:meth:`forward_grouped`), at ``G`` times the bottleneck's arithmetic, which at
    ``d_u = 32`` is some 1% of a block's per language.

    Args:
        placement: where the instance sits (:class:`AdapterPlacement`).
        hidden: bottleneck width ``d_u`` (32); must equal the generator's ``d_u``.
    """

    sites = (AdapterSite.BLOCK_OUTPUT, AdapterSite.MLP_OUTPUT)
    accepts_packed_tokens = True
    positive_options = ('hidden',)
    reads_condition = True

    def __init__(self, placement: AdapterPlacement, hidden: int = 32) -> None:
        super().__init__(placement)
        width = self.width
        self.hidden = hidden = self.positive_option('hidden', hidden)
        self.down = nn.Linear(width, hidden)
        self.up = nn.Linear(hidden, width)
        # Held column-major: the grouped call reads W_up^T, a contiguous [d_u, D] block of its
        # product, whose gradient then has this layout, and autograd keeps a gradient of the
        # parameter's layout as it is rather than copying it (one copy per language and block
        # a step, each a kernel launch on a GPU). Shape, values and state dict are unchanged.
        self.up.weight = nn.Parameter(self.up.weight.detach().t().contiguous().t())

    def middle_matrix(self, ctx: AdapterContext, batch: int) -> torch.Tensor:
        """This block's ``W^z`` ``[B, d_u, d_u]`` from the context, checked."""
        condition = ctx.condition
        if not isinstance(condition, Mapping):
            raise ValueError(
                f'DynamicAdapter at block {self.block_index} needs per-caption W^z in '
                f'ctx.condition, got {type(condition).__name__}; configure a disentangler with '
                "a parameter generator (type='SemanticsDisentangler')")
        if self.block_index not in condition:
            raise UserKeyError(f'DynamicAdapter at block {self.block_index}: the generator '
                               f'makes W^z for blocks {sorted(condition)} only; set the '
                               "generator blocks to the dynamic adapters' blocks")
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

    @classmethod
    def forward_grouped(cls, adapters: Sequence[DynamicAdapter], x: torch.Tensor,
                        ctx: AdapterContext) -> torch.Tensor:
        """Each language's ``DA`` on its own rows, in one pass: ``[B, L, D]`` (or packed
        ``[T, D]``) -> the same.

        ``[W_down^1; ...; W_down^G] X`` is every language's bottleneck ``[B, L, G·d_u]``. One
        batched product with the sample's ``W^z`` placed in its language's block
        (``[B, G·d_u, d_u]``, zeros in the others) keeps the sample's own and applies ``W^z``.
        After the ReLU, ``h`` placed in its language's block next to the one-hot of the
        language meets ``[W_up^1 ... W_up^G | b_up^1 ... b_up^G]`` in one product, the bias
        included.
        """
        packed = ctx.packed
        matrix = adapters[0].middle_matrix(ctx, packed.batch if packed is not None
                                           else x.shape[0])
        h = F.linear(x, torch.cat([adapter.down.weight for adapter in adapters]),
                     torch.cat([adapter.down.bias for adapter in adapters]))
        if packed is not None:
            h = packed.unpack(h)
        samples = ctx.membership.rows(h.dtype, None)                           # [B, 1, G]
        # [W^z placed in the sample's block]^T: spread along the last dim, then a transposed
        # view, as the product needs no contiguous copy of it.
        h = torch.matmul(h, spread(matrix.to(h.dtype), samples).transpose(1, 2))
        if packed is not None:
            h = packed.pack(h)
        h = torch.relu(h)
        one_hot = ctx.membership.rows(h.dtype, packed).expand(*h.shape[:-1], -1)
        # Stacked along dim 0, each W_up^T and bias gets its gradient as a contiguous block,
        # in the parameter's own layout: taken without a copy.
        up = torch.cat([adapter.up.weight.t() for adapter in adapters]
                       + [adapter.up.bias.unsqueeze(0) for adapter in adapters])
        return x + torch.matmul(torch.cat([spread(h, one_hot), one_hot], dim=-1), up)
