"""Compacter (Karimi Mahabadi et al., 2021): adapters built from hypercomplex (PHM) layers.

A PHM layer's weight is a sum of Kronecker products, ``W = Σ_{i=1..n} A_i ⊗ B_i`` with
``W ∈ R^{d_in×d_out}``, ``A_i ∈ R^{n×n}`` and ``B_i ∈ R^{(d_in/n)×(d_out/n)}`` (Compacter Eq. 4).
Compacter shares the "rules" ``A_i`` across all its layers and factorises each
``B_i = s_i t_iᵀ`` with rank-1 factors ``s_i ∈ R^{d_in/n}``, ``t_i ∈ R^{d_out/n}`` (Eq. 5), so a
layer holds ``n (d_in + d_out) / n · r`` weights plus its bias, and the ``n³`` rule weights are paid
once per language.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from xmr.models.adapters.base import AdapterContext, AdapterPlacement, AdapterSite, BaseAdapter
from xmr.models.adapters.houlsby import get_activation
from xmr.models.unowned import hold_unowned
from xmr.registry import ADAPTERS


class PHMRule(nn.Module):
    """The shared rule matrices ``A_i``, ``[n, n, n]`` (``A[i]`` is ``A_i``).

    Args:
        phm_dim: ``n``.
        init_std: standard deviation of their normal initialisation.
    """

    def __init__(self, phm_dim: int, init_std: float = 0.01) -> None:
        super().__init__()
        self.phm_dim = phm_dim
        self.rule = nn.Parameter(torch.randn(phm_dim, phm_dim, phm_dim) * init_std)


class PHMLinear(nn.Module):
    """``y = x W + b`` with ``W = Σ_i A_i ⊗ (s_i t_iᵀ)`` (rank ``r`` factors).

    Args:
        in_features: ``d_in`` (divisible by ``n``).
        out_features: ``d_out`` (divisible by ``n``).
        rule: the shared :class:`PHMRule` (held, not registered: its owner registers it once).
        rank: rank ``r`` of each ``B_i`` (Compacter: 1).
        init_std: standard deviation of the factors' normal initialisation.
        zero_init: start the right factors ``t_i`` at zero, so ``W = 0``.
    """

    def __init__(self, in_features: int, out_features: int, rule: PHMRule, rank: int = 1,
                 init_std: float = 1e-4, zero_init: bool = False) -> None:
        super().__init__()
        n = rule.phm_dim
        for name, size in (('in_features', in_features), ('out_features', out_features)):
            if size % n:
                raise ValueError(f'PHM layer {name}={size} is not divisible by phm_dim={n}')
        hold_unowned(self, 'rule', rule)
        self.in_features, self.out_features = in_features, out_features
        self.left = nn.Parameter(torch.randn(n, in_features // n, rank) * init_std)
        right = torch.zeros(n, rank, out_features // n)
        if not zero_init:
            right.normal_(std=init_std)
        self.right = nn.Parameter(right)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def weight(self) -> torch.Tensor:
        """``W = Σ_i A_i ⊗ B_i``, ``[d_in, d_out]``."""
        blocks = self.left @ self.right  # B_i = s_i t_iᵀ: [n, d_in/n, d_out/n]
        rule = self.rule.rule
        # (A_i ⊗ B_i)[a·p + b, c·q + e] = A_i[a, c] · B_i[b, e], summed over i.
        kron = torch.einsum('iac,ibe->abce', rule, blocks)
        return kron.reshape(self.in_features, self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., d_in] -> [..., d_out]``."""
        return x @ self.weight() + self.bias


@ADAPTERS.register_module()
class CompacterAdapter(BaseAdapter):
    """``x + PHM_up σ(PHM_down x)`` after the attention output and after the FFN.

    The bottleneck is ``width // reduction_factor`` wide (PECTVLM: reduction 16, ``n = 4``,
    rank 1). Every instance of one language built from one config shares the rule
    :class:`PHMRule` (``A_i``), which the adapter set registers once as ``shared_<k>``.

    Args:
        placement: where the instance sits (:class:`AdapterPlacement`).
        reduction_factor: ``D / hidden``.
        phm_dim: ``n``, the number of Kronecker summands (divides ``D`` and the hidden width).
        rank: rank of the factorised ``B_i``.
        activation: bottleneck nonlinearity (see :data:`~xmr.models.adapters.houlsby.ACTIVATIONS`).
        init_std: standard deviation of the factors' initialisation (OpenDelta: 1e-4).
        rule_init_std: standard deviation of the rules' initialisation.
        zero_init: start the up projection's right factors at zero (an exact identity).
        shared: the language's :class:`PHMRule`; a standalone instance builds and owns its own.
    """

    sites = (AdapterSite.ATTN_OUTPUT, AdapterSite.MLP_OUTPUT, AdapterSite.BLOCK_OUTPUT)
    default_sites = (AdapterSite.ATTN_OUTPUT, AdapterSite.MLP_OUTPUT)
    accepts_packed_tokens = True

    def __init__(self, placement: AdapterPlacement, reduction_factor: int = 16,
                 phm_dim: int = 4, rank: int = 1, activation: str = 'gelu_new',
                 init_std: float = 1e-4, rule_init_std: float = 0.01, zero_init: bool = False,
                 shared: PHMRule | None = None) -> None:
        super().__init__(placement)
        width = self.width
        if reduction_factor <= 0 or width % reduction_factor:
            raise ValueError(f'Compacter reduction_factor {reduction_factor} must divide the '
                             f'tower width {width}')
        if shared is None:
            self.own_rule = PHMRule(phm_dim, rule_init_std)
            shared = self.own_rule
        elif shared.phm_dim != phm_dim:
            raise ValueError(f'shared PHM rule has n={shared.phm_dim}, the adapter n={phm_dim}')
        hidden = width // reduction_factor
        self.activation_name = activation
        self.activation = get_activation(activation)
        self.down = PHMLinear(width, hidden, shared, rank, init_std)
        self.up = PHMLinear(hidden, width, shared, rank, init_std, zero_init=zero_init)

    @classmethod
    def build_shared(cls, width: int, phm_dim: int = 4, rule_init_std: float = 0.01,
                     **options: Any) -> PHMRule:
        """One :class:`PHMRule` per language and config: the ``A_i`` every layer shares."""
        return PHMRule(phm_dim, rule_init_std)

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        """``[B, L, D] -> [B, L, D]``."""
        return x + self.up(self.activation(self.down(x)))
