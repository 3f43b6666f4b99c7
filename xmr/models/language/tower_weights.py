"""One language's own trainable copies of chosen weights of the frozen text tower.

PECTVLM tunes, beside its PEFT module, the tower's LayerNorms and M-CLIP's linear head; its full
fine-tuning baseline (FT) tunes the whole text encoder. Both are per language: each target
language gets copies of the chosen weights, initialised from the frozen tower when the model is
built, which stand in for the originals while that language's captions are encoded. The tower
itself, shared by every language and by the source side, never changes.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from torch import nn

from xmr.models.swapped_parameters import swapped_parameters

__all__ = ['TowerWeights', 'select_tower_weights']


def select_tower_weights(tower: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Names of the tower's parameters matching any of ``patterns`` (``fnmatch``, ``*`` spans
    dots), in the tower's order.

    Raises:
        ValueError: a pattern that matches no parameter, named with a few of the tower's names.
    """
    names = [name for name, _ in tower.named_parameters()]
    for pattern in patterns:
        if not fnmatch.filter(names, pattern):
            raise ValueError(f'tuned_weights pattern {pattern!r} matches no parameter of the text '
                             f'tower {type(tower).__name__} (its names look like {names[:3]} ... '
                             f'{names[-2:]})')
    return [name for name in names if any(fnmatch.fnmatchcase(name, p) for p in patterns)]


class TowerWeights(nn.Module):
    """Trainable copies of the tower weights matching ``patterns``, under the tower's own names.

    The copies form a tree of plain modules mirroring the tower's, so that a state-dict key of
    this module (``layers.0.output.LayerNorm.weight``) is the name of the weight it replaces.

    Args:
        tower: the frozen text tower; its current values initialise the copies.
        patterns: ``fnmatch`` patterns over the tower's parameter names, e.g.
            ``['layers.*.output.LayerNorm.*', 'text_proj.*']`` (PECTVLM) or ``['*']`` (FT).
    """

    def __init__(self, tower: nn.Module, patterns: Sequence[str]) -> None:
        super().__init__()
        for name in select_tower_weights(tower, patterns):
            *path, leaf = name.split('.')
            owner: nn.Module = self
            for part in path:
                if part not in owner._modules:
                    owner.add_module(part, nn.Module())
                owner = owner._modules[part]
            owner.register_parameter(
                leaf, nn.Parameter(tower.get_parameter(name).detach().clone()))

    @contextmanager
    def swapped_into(self, tower: nn.Module) -> Iterator[None]:
        """Let ``tower`` run on these copies (gradients reach them, not its own weights) until
        the block exits, even by an exception."""
        places = ((name.rpartition('.'), weight) for name, weight in self.named_parameters())
        with swapped_parameters((tower.get_submodule(path), leaf, weight)
                                for (path, _, leaf), weight in places):
            yield
