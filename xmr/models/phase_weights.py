"""The loss weights a training phase hands to a model (``PhasedTrainLoop`` -> ``set_phase``)."""
from __future__ import annotations

from collections.abc import Mapping, Set


def checked_loss_weights(phase: str, loss_weights: Mapping[str, float],
                         known: Set[str]) -> dict[str, float]:
    """The phase's non-zero weights as floats, after checking every name is a loss the model has.

    Raises:
        KeyError: naming the unknown weights and the losses the model computes.
    """
    unknown = set(loss_weights) - set(known)
    if unknown:
        raise KeyError(f'phase {phase}: unknown loss weights {sorted(unknown)}; this model '
                       f'computes {sorted(known)}')
    return {name: float(weight) for name, weight in loss_weights.items() if weight}
