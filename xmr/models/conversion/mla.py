"""MLA's (AIM3-RUC/MLA) acquirers as xmr static adapters.

MLA's ``Acquirer`` after block ``i`` is ``x + c_proj(ReLU(c_fc(x)))`` (its ``ln`` is never
called), keyed ``transformer.resblocks.<i>.acquirer.<lang>.mlp.{c_fc,c_proj}``: xmr's
:class:`~xmr.models.adapters.StaticAdapter` ``down`` / ``up`` at the block output.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from xmr.models.conversion.authors import adapter_key, take

#: MLA acquirer layer -> xmr static adapter layer.
LAYERS = {'mlp.c_fc': 'down', 'mlp.c_proj': 'up'}


def map_mla(state: Mapping[str, torch.Tensor], model: nn.Module,
            used: set) -> dict[str, torch.Tensor]:
    """``{xmr key: tensor}`` of every language's static adapters."""
    branch = model.language_branch
    return {adapter_key(lang, block, f'{xmr}.{kind}'):
            take(state, used, f'transformer.resblocks.{block}.acquirer.{lang}.{layer}.{kind}')
            for lang in branch.languages for block in range(branch.num_blocks)
            for layer, xmr in LAYERS.items() for kind in ('weight', 'bias')}
