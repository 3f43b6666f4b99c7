"""Compacter (Karimi Mahabadi et al., 2021): adapters built from hypercomplex (PHM) layers.

A PHM layer's weight is a sum of Kronecker products, ``W = Σ_{i=1..n} A_i ⊗ B_i`` with
``W ∈ R^{d_in×d_out}``, ``A_i ∈ R^{n×n}`` and ``B_i ∈ R^{(d_in/n)×(d_out/n)}`` (Compacter Eq. 4),
each ``B_i = s_i t_i`` factorised with rank-``r`` factors ``s_i ∈ R^{(d_in/n)×r}``,
``t_i ∈ R^{r×(d_out/n)}`` (Eq. 5). The paper shares the "rules" ``A_i`` across all layers
(``share_rule=True``: the ``n³`` rule weights paid once per language); OpenDelta's
``CompacterModel``, which PECTVLM ran, refuses that sharing and gives every PHM layer its own rule,
the default here.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.adapters.base import AdapterContext, AdapterPlacement, AdapterSite, BaseAdapter
from xmr.models.adapters.houlsby import get_activation
from xmr.models.unowned import hold_unowned
from xmr.registry import ADAPTERS


class PHMRule(nn.Module):
    """The rule matrices ``A_i``, ``[n, n, n]`` (``A[i]`` is ``A_i``).

    Args:
        phm_dim: ``n``.
        init_std: standard deviation of their normal initialisation (OpenDelta: 0.01).
    """

    def __init__(self, phm_dim: int, init_std: float = 0.01) -> None:
        super().__init__()
        self.phm_dim = phm_dim
        self.rule = nn.Parameter(torch.randn(phm_dim, phm_dim, phm_dim) * init_std)


#: How a PHM layer's factors ``s_i``, ``t_i`` start: ``glorot_uniform`` (OpenDelta's default,
#: ``xavier_uniform_`` with gain √2 on each ``[d/n, r]`` slice) or ``normal`` (N(0, ``init_std``)).
FACTOR_INITS = ('glorot_uniform', 'normal')


class PHMLinear(nn.Module):
    """``y = x W + b`` with ``W = Σ_i A_i ⊗ (s_i t_i)`` (rank ``r`` factors).

    Args:
        in_features: ``d_in`` (divisible by ``n``).
        out_features: ``d_out`` (divisible by ``n``).
        phm_dim: ``n``.
        rank: rank ``r`` of each ``B_i`` (Compacter: 1).
        factor_init: one of :data:`FACTOR_INITS`.
        init_std: standard deviation of the factors under ``factor_init='normal'``.
        zero_init: start the right factors ``t_i`` at zero, so ``W = 0``.
        rule: a rule shared with other layers (held, not registered: its owner registers it
            once); ``None``: the layer owns its own, N(0, ``rule_init_std``).
        rule_init_std: standard deviation of the layer's own rule.
    """

    def __init__(self, in_features: int, out_features: int, phm_dim: int = 4, rank: int = 1,
                 factor_init: str = 'glorot_uniform', init_std: float = 1e-4,
                 zero_init: bool = False, rule: PHMRule | None = None,
                 rule_init_std: float = 0.01) -> None:
        super().__init__()
        n = phm_dim
        for name, size in (('in_features', in_features), ('out_features', out_features)):
            if size % n:
                raise ValueError(f'PHM layer {name}={size} is not divisible by phm_dim={n}')
        if factor_init not in FACTOR_INITS:
            raise ValueError(f'PHM factor_init {factor_init!r} is none of {FACTOR_INITS}')
        if rule is None:
            self.rule = PHMRule(n, rule_init_std)
        elif rule.phm_dim != n:
            raise ValueError(f'shared PHM rule has n={rule.phm_dim}, the layer n={n}')
        else:
            hold_unowned(self, 'rule', rule)
        self.in_features, self.out_features = in_features, out_features
        self.left = nn.Parameter(self._factors(n, in_features // n, rank, factor_init, init_std))
        right = self._factors(n, rank, out_features // n, factor_init, init_std)
        self.right = nn.Parameter(right.zero_() if zero_init else right)
        self.bias = nn.Parameter(torch.zeros(out_features))

    @staticmethod
    def _factors(n: int, rows: int, cols: int, init: str, std: float) -> torch.Tensor:
        """``n`` factor slices ``[rows, cols]``, each initialised on its own as OpenDelta does."""
        if init == 'normal':
            return torch.randn(n, rows, cols) * std
        factors = torch.empty(n, rows, cols)
        for piece in factors:
            nn.init.xavier_uniform_(piece, gain=math.sqrt(2))
        return factors

    def weight(self) -> torch.Tensor:
        """``W = Σ_i A_i ⊗ B_i``, ``[d_in, d_out]``."""
        blocks = self.left @ self.right  # B_i = s_i t_iᵀ: [n, d_in/n, d_out/n]
        rule = self.rule.rule
        # (A_i ⊗ B_i)[a·p + b, c·q + e] = A_i[a, c] · B_i[b, e], summed over i.
        kron = torch.einsum('iac,ibe->abce', rule, blocks)
        return kron.reshape(self.in_features, self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., d_in] -> [..., d_out]``."""
        # linear, not `x @ W + b`: autocast casts the bias with the weight, where an fp32 bias
        # added to the product would promote a bf16 / fp16 hidden state to fp32.
        return F.linear(x, self.weight().t(), self.bias)


@ADAPTERS.register_module()
class CompacterAdapter(BaseAdapter):
    """``x + PHM_up σ(PHM_down x)`` after the attention output and after the FFN.

    The bottleneck is ``width // reduction_factor`` wide. The defaults are those of OpenDelta's
    ``CompacterModel``, which PECTVLM ran (reduction 16, ``n = 4``, rank 1, ``gelu_new``, a rule
    per PHM layer, glorot-uniform factors, rules N(0, 0.01), biases 0). With ``share_rule`` every
    instance of one language built from one config holds one :class:`PHMRule` (the Compacter
    paper's sharing), which the adapter set registers once as ``shared_<k>``.

    Args:
        placement: where the instance sits (:class:`AdapterPlacement`).
        reduction_factor: ``D / hidden``.
        phm_dim: ``n``, the number of Kronecker summands (divides ``D`` and the hidden width).
        rank: rank of the factorised ``B_i``.
        activation: bottleneck nonlinearity (see :data:`~xmr.models.adapters.houlsby.ACTIVATIONS`).
        share_rule: one rule for all the language's layers (the paper) instead of one per layer.
        factor_init: one of :data:`FACTOR_INITS`.
        init_std: standard deviation of the factors under ``factor_init='normal'``.
        rule_init_std: standard deviation of the rules' initialisation.
        zero_init: start the up projection's right factors at zero (an exact identity).
        shared: the language's :class:`PHMRule` under ``share_rule`` (a standalone instance
            builds and owns its own).
    """

    sites = (AdapterSite.ATTN_OUTPUT, AdapterSite.MLP_OUTPUT, AdapterSite.BLOCK_OUTPUT)
    default_sites = (AdapterSite.ATTN_OUTPUT, AdapterSite.MLP_OUTPUT)
    accepts_packed_tokens = True
    positive_options = ('reduction_factor', 'phm_dim', 'rank')
    given_by_builder = ('placement', 'shared')

    def __init__(self, placement: AdapterPlacement, reduction_factor: int = 16,
                 phm_dim: int = 4, rank: int = 1, activation: str = 'gelu_new',
                 share_rule: bool = False, factor_init: str = 'glorot_uniform',
                 init_std: float = 1e-4, rule_init_std: float = 0.01, zero_init: bool = False,
                 shared: PHMRule | None = None) -> None:
        super().__init__(placement)
        width = self.width
        reduction_factor = self.positive_option('reduction_factor', reduction_factor)
        phm_dim = self.positive_option('phm_dim', phm_dim)
        rank = self.positive_option('rank', rank)
        if width % reduction_factor:
            raise ValueError(f'Compacter reduction_factor {reduction_factor} must divide the '
                             f'tower width {width}')
        hidden = width // reduction_factor
        if hidden % phm_dim or width % phm_dim:
            # PHMLinear's own refusal named neither option nor the width they came from.
            raise ValueError(f'Compacter phm_dim {phm_dim} must divide the tower width {width} '
                             f'and the bottleneck width // reduction_factor = {hidden}: its '
                             'layers are sums of phm_dim x phm_dim Kronecker blocks; choose a '
                             'smaller phm_dim or reduction_factor')
        if share_rule and shared is None:
            self.own_rule = shared = PHMRule(phm_dim, rule_init_std)
        self.activation_name = activation
        self.activation = get_activation(activation)
        layer = dict(phm_dim=phm_dim, rank=rank, factor_init=factor_init, init_std=init_std,
                     rule=shared, rule_init_std=rule_init_std)
        self.down = PHMLinear(width, hidden, **layer)
        self.up = PHMLinear(hidden, width, zero_init=zero_init, **layer)

    @classmethod
    def build_shared(cls, width: int, phm_dim: int = 4, share_rule: bool = False,
                     rule_init_std: float = 0.01, **options: Any) -> PHMRule | None:
        """Under ``share_rule``, one :class:`PHMRule` per language and config: the ``A_i``
        every layer shares; else none."""
        return PHMRule(phm_dim, rule_init_std) if share_rule else None

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        """``[B, L, D] -> [B, L, D]``."""
        return x + self.up(self.activation(self.down(x)))

    def settings(self) -> dict[str, Any]:
        """The bottleneck's ``activation``."""
        return dict(activation=self.activation_name)
