"""Holding a module another module owns, without registering it as a child."""
from __future__ import annotations

from torch import nn


def hold_unowned(holder: nn.Module, name: str, module: nn.Module) -> None:
    """Give ``holder`` the attribute ``name`` -> ``module`` without making it a submodule.

    The frozen text tower belongs to the backbone, the embedding block to the branch, a shared
    Compacter rule to the adapter set; a module that only uses one must not register it again,
    or its parameters would appear twice in ``state_dict``, ``parameters()`` and the optimiser,
    and ``holder.to()`` would move the owner's weights behind its back.
    """
    object.__setattr__(holder, name, module)
