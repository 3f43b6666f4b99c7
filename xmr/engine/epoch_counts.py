"""Counts of iterations that a config gives in epochs of its training data: ``dict(epochs=E)``.

A count the config computes from its own batch size (``val_interval = train_pairs // 64``) stays
that many iterations when ``--cfg-options train_dataloader.batch_size=128`` halves an epoch, so
validation and checkpoints fall off the epoch's end. Where a count of iterations goes
(``train_cfg.val_interval``, a hook's ``interval``) a config states ``dict(epochs=E)`` instead,
``E`` a positive number (``0.25``: every quarter epoch), and
:class:`~xmr.engine.loops.PhasedTrainLoop` resolves it as it is built, before the first step, to
``floor(E x B)``, ``B`` the batches one pass of the built train dataloader yields: its final
batch size, its ``drop_last`` or language batches, per process under DDP, as a phase's
``epochs`` resolves.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from xmr.utils.listing import counted

__all__ = ['batches_per_epoch', 'check_epochs', 'is_epochs', 'iterations_in', 'resolve_count']


def is_epochs(value: Any) -> bool:
    """Whether ``value`` is a count in epochs (a dict, checked by :func:`check_epochs`), not
    iterations."""
    return isinstance(value, Mapping)


def check_epochs(where: str, value: Mapping) -> None:
    """``value`` is ``dict(epochs=E)``, ``E`` a positive finite number.

    Raises:
        ValueError: naming ``where``, the value and the form it takes.
    """
    epochs = value.get('epochs')
    if set(value) != {'epochs'} or isinstance(epochs, bool) or \
            not isinstance(epochs, numbers.Real) or not math.isfinite(epochs) or epochs <= 0:
        raise ValueError(f'{where}={dict(value)!r}: a count in epochs is dict(epochs=E), E a '
                         'positive number of passes over the training data (0.25: a quarter '
                         'of one), or give an integer of iterations')


def batches_per_epoch(dataloader: Any, needed_by: str) -> int:
    """The batches one pass of the built ``dataloader`` yields (``len``).

    Raises:
        ValueError: the dataloader has no length (an iterable dataset), naming ``needed_by``.
    """
    try:
        return len(dataloader)
    except TypeError as error:
        dataset = type(getattr(dataloader, 'dataset', dataloader)).__name__
        raise ValueError(f'{needed_by}: epochs need a dataloader with a length, and that of '
                         f'{dataset} has none; give iterations instead') from error


def iterations_in(where: str, epochs: numbers.Real, batches: int) -> int:
    """``floor(epochs x batches)``, the whole iterations of ``epochs`` passes of ``batches``.

    The product is exact, of the decimal ``epochs`` as written: in floats
    ``0.29 x 100 = 28.999...``.

    Raises:
        ValueError: it is no whole iteration, naming ``where``.
    """
    iterations = math.floor(Fraction(str(epochs)) * batches)
    if iterations < 1:
        raise ValueError(f'{where}: {epochs} epochs of {batches} batches make no whole '
                         'iteration; give more epochs, or iterations')
    return iterations


def resolved_text(epochs: numbers.Real, iterations: int, batches: int) -> str:
    """How a count in epochs resolved, as the log says it: ``1 epoch = 226 iterations (226 per
    epoch)``."""
    return (f'{counted(epochs, "epoch")} = {counted(iterations, "iteration")} '
            f'({batches} per epoch)')


def resolve_count(where: str, value: Any, dataloader: Any) -> Any:
    """``value`` in iterations: a count in epochs (:func:`is_epochs`) resolved against the
    batches of one pass of the built ``dataloader``, any other value as it is.

    Raises:
        ValueError: a malformed count in epochs, a dataloader without a length, or a count of no
            whole iteration, naming ``where``.
    """
    if not is_epochs(value):
        return value
    check_epochs(where, value)
    return iterations_in(where, value['epochs'], batches_per_epoch(dataloader, where))
