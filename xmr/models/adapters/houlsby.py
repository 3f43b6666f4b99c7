"""The Houlsby bottleneck adapter (Houlsby et al., 2019), as PECTVLM applies it."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.adapters.base import AdapterContext, AdapterPlacement, AdapterSite, BaseAdapter
from xmr.registry import ADAPTERS

#: Nonlinearities of the bottleneck; ``gelu_new`` is GELU's tanh approximation (OpenDelta's
#: default for adapters and Compacter).
ACTIVATIONS = {
    'gelu': F.gelu,
    'gelu_new': lambda x: F.gelu(x, approximate='tanh'),
    'relu': F.relu,
    'swish': F.silu,
}


def get_activation(name: str):
    """The activation function called ``name`` (see :data:`ACTIVATIONS`)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation '{name}'; choose from {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


@ADAPTERS.register_module()
class HoulsbyAdapter(BaseAdapter):
    """``x + W_up σ(W_down x)`` after the attention output and after the FFN of every block.

    Placed, by default, at ``attn.output`` and ``mlp.output``: on the output of the attention
    projection and of the FFN, before their residual add (and, in post-LN towers such as
    XLM-R, before the LayerNorm), which is where Houlsby et al. and PECTVLM's OpenDelta config
    (``attention.output.dense``, ``output.dense``) put it.

    Args:
        placement: where the instance sits (:class:`AdapterPlacement`).
        hidden: bottleneck width (PECTVLM: 24).
        activation: ``gelu_new`` (default), ``gelu``, ``relu`` or ``swish``.
        init_std: standard deviation of the normal initialisation of both projections' weights
            (biases start at zero); OpenDelta's 0.01 keeps the adapter close to the identity.
        zero_init: start ``W_up`` at zero so a fresh adapter is exactly the identity.
    """

    sites = (AdapterSite.ATTN_OUTPUT, AdapterSite.MLP_OUTPUT, AdapterSite.BLOCK_OUTPUT)
    default_sites = (AdapterSite.ATTN_OUTPUT, AdapterSite.MLP_OUTPUT)
    accepts_packed_tokens = True
    positive_options = ('hidden',)

    def __init__(self, placement: AdapterPlacement, hidden: int = 24, activation: str = 'gelu_new',
                 init_std: float = 0.01, zero_init: bool = False) -> None:
        super().__init__(placement)
        width = self.width
        hidden = self.positive_option('hidden', hidden)
        self.activation_name = activation
        self.activation = get_activation(activation)
        self.down = nn.Linear(width, hidden)
        self.up = nn.Linear(hidden, width)
        for layer in (self.down, self.up):
            nn.init.normal_(layer.weight, std=init_std)
            nn.init.zeros_(layer.bias)
        if zero_init:
            nn.init.zeros_(self.up.weight)

    def forward(self, x: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        """``[B, L, D] -> [B, L, D]``."""
        return x + self.up(self.activation(self.down(x)))

    def settings(self) -> dict[str, Any]:
        """The bottleneck's ``activation``."""
        return dict(activation=self.activation_name)
