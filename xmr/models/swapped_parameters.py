"""Letting a module run on other tensors in place of its parameters, for one block of code."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn


@contextmanager
def swapped_parameters(replacements: Iterable[tuple[nn.Module, str, torch.Tensor]]
                       ) -> Iterator[None]:
    """Let each ``module`` read ``tensor`` as its parameter ``name`` until the block exits, even
    by an exception; then its own parameter is back, untouched.

    A language's own tower weights (:class:`~xmr.models.language.tower_weights.TowerWeights`)
    and the autocast copies of frozen weights (:class:`~xmr.engine.frozen_casts.
    FrozenWeightCasts`) go in this way. Replacements are made as the iterable yields them, so
    one that fails midway still puts back those already made.

    Args:
        replacements: ``(module, parameter name, tensor)`` triples.
    """
    originals = []
    try:
        for module, name, tensor in replacements:
            originals.append((module, name, module._parameters[name]))
            module._parameters[name] = tensor
        yield
    finally:
        for module, name, original in reversed(originals):
            module._parameters[name] = original
