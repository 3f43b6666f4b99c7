"""One language's own trainable copies of chosen weights of the frozen text tower.

PECTVLM tunes, beside its PEFT module, the tower's LayerNorms and M-CLIP's linear head; its full
fine-tuning baseline (FT) tunes the whole text encoder. Both are per language: each target
language gets copies of the chosen weights, initialised from the frozen tower when the model is
built, which stand in for the originals while that language's captions are encoded. The tower
itself, shared by every language and by the source side, never changes.

Only weights the language's branch reads are copied (:func:`unread_tower_weights`): a branch
with its own token table never reads the tower's, nor one running ``num_blocks`` the later
blocks, so ``['*']`` copies the tower as the branch runs it. A copy of CLIP's 49,408 x 512
table would train nothing, yet sit in the optimiser and in every checkpoint.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from torch import nn

from xmr.models.swapped_parameters import swapped_parameters

if TYPE_CHECKING:
    from xmr.models.backbones.base import TextTower

__all__ = ['TowerWeights', 'select_tower_weights', 'unread_tower_weights']


def unread_tower_weights(tower: TextTower, num_blocks: int, embedding: nn.Module
                         ) -> dict[str, str]:
    """The tower's parameters a target branch never reads, each with why: the token table
    (:meth:`~xmr.models.backbones.base.TextTower.token_table_module`) when the branch's
    ``embedding`` has its own (no ``reads_tower``), and the blocks past the ``num_blocks`` it
    runs (:meth:`~xmr.models.backbones.base.TextTower.block_module`). A tower that names
    neither module has every weight read.

    Returns:
        ``{parameter name: reason}`` in the tower's order.
    """
    unread: list[tuple[nn.Module | None, str]] = []
    if not getattr(embedding, 'reads_tower', False):
        unread.append((tower.token_table_module(), 'the branch embeds with its own token table '
                                                   f'({type(embedding).__name__})'))
    unread += [(tower.block_module(index), f"the branch runs {num_blocks} of the tower's "
                                           f'{tower.num_blocks} blocks (num_blocks={num_blocks})')
               for index in range(num_blocks, tower.num_blocks)]
    reasons = {id(weight): why for module, why in unread if module is not None
               for weight in module.parameters()}
    return {name: reasons[id(weight)] for name, weight in tower.named_parameters()
            if id(weight) in reasons}


def select_tower_weights(tower: nn.Module, patterns: Sequence[str],
                         unread: Mapping[str, str] | None = None) -> list[str]:
    """Names of the tower's parameters matching any of ``patterns`` (``fnmatch``, ``*`` spans
    dots), in the tower's order, less those in ``unread`` (:func:`unread_tower_weights`).

    Raises:
        ValueError: a pattern that matches no parameter, named with a few of the tower's names;
            one that matches only ``unread`` ones, named with them and why they are unread.
    """
    unread = unread or {}
    names = [name for name, _ in tower.named_parameters()]
    for pattern in patterns:
        matched = fnmatch.filter(names, pattern)
        if not matched:
            raise ValueError(f'tuned_weights pattern {pattern!r} matches no parameter of the text '
                             f'tower {type(tower).__name__} (its names look like {names[:3]} ... '
                             f'{names[-2:]})')
        if all(name in unread for name in matched):
            by_reason: dict[str, list[str]] = {}
            for name in matched:
                by_reason.setdefault(unread[name], []).append(name)
            listed = '; '.join(f"{', '.join(names_[:3])}{' ...' if len(names_) > 3 else ''} "
                               f"({len(names_)} weight{'s' if len(names_) > 1 else ''}: {why})"
                               for why, names_ in by_reason.items())
            raise ValueError(f'tuned_weights pattern {pattern!r} matches only weights the branch '
                             f'never reads: {listed}; drop the pattern (a copy would train '
                             'nothing)')
    return [name for name in names
            if name not in unread and any(fnmatch.fnmatchcase(name, p) for p in patterns)]


class TowerWeights(nn.Module):
    """Trainable copies of the tower weights matching ``patterns``, under the tower's own names.

    The copies form a tree of plain modules mirroring the tower's, so that a state-dict key of
    this module (``layers.0.output.LayerNorm.weight``) is the name of the weight it replaces.

    Args:
        tower: the frozen text tower; its current values initialise the copies.
        patterns: ``fnmatch`` patterns over the tower's parameter names, e.g.
            ``['layers.*.output.LayerNorm.*', 'text_proj.*']`` (PECTVLM) or ``['*']`` (FT).
        unread: the tower's parameters the branch never reads, with why
            (:func:`unread_tower_weights`): not copied, and a pattern matching only them is
            refused.
    """

    def __init__(self, tower: nn.Module, patterns: Sequence[str],
                 unread: Mapping[str, str] | None = None) -> None:
        super().__init__()
        for name in select_tower_weights(tower, patterns, unread):
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
