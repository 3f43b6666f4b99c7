"""DASD's parameter generator: per-caption middle matrices ``W^z`` of the dynamic adapters."""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


class QuickGELU(nn.Module):
    """``x σ(1.702 x)``: OpenAI CLIP's GELU approximation, used by the authors' generator."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


ACTIVATIONS = {'gelu': nn.GELU, 'quick_gelu': QuickGELU}


class ParameterGenerator(nn.Module):
    """``z = MLP([f^sr; f^sa])``, then ``W_i^z = reshape(W_i^down z)`` for every adapted block.

    One generator serves the target languages it is built for (``per_language=True``, which
    the paper configs set, builds one per language): ``z`` is shared by all blocks,
    each block ``i`` has its own ``W_i^down`` (with bias, as in the authors' code). The MLP is one
    linear layer and a GELU (the authors' code: ``Linear(1024→512)`` + QuickGELU, which
    ``activation='quick_gelu'`` reproduces).

    Args:
        in_features: width of the concatenated condition features (``E + D`` for
            ``[f^sr; f^sa]``; ``E`` or ``D`` when one of them is ablated).
        blocks: indices of the blocks whose dynamic adapters receive a ``W^z``.
        d_z: width of ``z`` (512 in the paper).
        d_u: side of each ``W^z`` (32), equal to the dynamic adapters' bottleneck.
        activation: ``'gelu'`` or ``'quick_gelu'`` (``x σ(1.702 x)``, the authors' code).
    """

    def __init__(self, in_features: int, blocks: Sequence[int], d_z: int = 512,
                 d_u: int = 32, activation: str = 'gelu') -> None:
        super().__init__()
        blocks = [int(b) for b in blocks]
        if not blocks:
            raise ValueError('the parameter generator needs at least one block to generate for')
        if len(set(blocks)) != len(blocks) or min(blocks) < 0:
            raise ValueError(f'generator blocks must be distinct non-negative indices, got '
                             f'{blocks}')
        if d_z < 1 or d_u < 1:
            raise ValueError(f'd_z and d_u must be positive, got d_z={d_z}, d_u={d_u}')
        if activation not in ACTIVATIONS:
            raise ValueError(f'generator activation {activation!r} is not one of '
                             f'{sorted(ACTIVATIONS)}')
        self.blocks = sorted(blocks)
        self.d_z, self.d_u = d_z, d_u
        self.activation = activation
        self.to_z = nn.Sequential(nn.Linear(in_features, d_z), ACTIVATIONS[activation]())
        # ModuleDict keys must be strings.
        self.heads = nn.ModuleDict({str(b): nn.Linear(d_z, d_u * d_u) for b in self.blocks})

    def forward(self, features: torch.Tensor) -> dict[int, torch.Tensor]:
        """``[B, in_features]`` -> ``{block: W^z [B, d_u, d_u]}``.

        The condition the dynamic adapters read: :class:`~xmr.models.adapters.DynamicAdapter`
        at block ``i`` uses entry ``i``.
        """
        z = self.to_z(features)
        # Every block's head in one product, and one backward node for all their gradients.
        heads = [self.heads[str(b)] for b in self.blocks]
        matrices = F.linear(z, torch.cat([head.weight for head in heads]),
                            torch.cat([head.bias for head in heads]))
        return dict(zip(self.blocks,
                        matrices.view(-1, len(heads), self.d_u, self.d_u).unbind(1)))
