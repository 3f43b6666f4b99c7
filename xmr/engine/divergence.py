"""Stopping a run whose loss is no longer finite, before any hook saves or validates that state."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from mmengine.dist import is_distributed

from xmr.models.losses.distributed import host_group


class TrainingDivergedError(RuntimeError):
    """The loss was non-finite for more consecutive iterations than the loop tolerates."""


def nonfinite_terms(outputs: Mapping[str, Any]) -> dict[str, float]:
    """The logged scalars of one iteration (``{'loss': ..., 'loss_cl': ...}``) that are NaN or inf.

    The weighted terms are named when any is non-finite; the total ``loss`` only otherwise.
    """
    values = {name: float(value.detach()) if isinstance(value, torch.Tensor) else value
              for name, value in outputs.items()
              if not isinstance(value, torch.Tensor) or value.numel() == 1}
    bad = {name: value for name, value in values.items()
           if isinstance(value, float) and not math.isfinite(value)}
    terms = {name: value for name, value in bad.items() if name != 'loss'}
    return terms or bad


def max_over_ranks(value: int) -> int:
    """The largest of ``value`` over the processes (``value`` itself without DDP).

    Exchanged through the host's gloo group (:func:`~xmr.models.losses.distributed.host_group`):
    under NCCL a value sent through the device would wait for every kernel queued before it.
    """
    if not is_distributed():
        return value
    largest = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(largest, op=dist.ReduceOp.MAX, group=host_group())
    return int(largest.item())


def on_any_rank(flag: bool) -> bool:
    """``flag`` or'ed over the processes, so that every rank stops at the same iteration."""
    return bool(max_over_ranks(int(flag)))


class DivergenceMonitor:
    """Counts consecutive iterations whose loss is non-finite and stops training past a patience.

    The loss is what is counted: a step whose gradients are not finite is skipped by fp16's
    loss scaler, and by a fused optimiser behind xmr's ``OptimWrapper`` with ``clip_grad``,
    while the loss may stay finite; those steps are not divergence. With that skip a tolerated
    non-finite iteration leaves the weights as they were. Where no step is skipped, a step
    that applied non-finite gradients stops the run at once
    (:meth:`check_applied_gradients`): its weights are no longer finite.

    Args:
        patience: consecutive non-finite iterations tolerated; 0 stops at the first.
    """

    def __init__(self, patience: int = 0) -> None:
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ValueError(f'nonfinite_patience must be an integer >= 0, got {patience!r}')
        self.patience = patience
        self.streak = 0

    #: What to do after a divergence: a resumed run keeps the schedule of a phase it began.
    WAYS_ON = ("lower the phase's lr or lengthen its warm-up, then resume from a checkpoint "
               'written at or before its start (a phase already begun resumes under its own '
               "schedule only), or start a new run from the last checkpoint's weights into "
               'another --work-dir (load_from=..., without --resume)')

    def check(self, outputs: Mapping[str, Any], phase: str, iteration: int) -> bool:
        """Whether iteration ``iteration`` (1-based, as logged) of ``phase`` had a finite loss.

        Raises:
            TrainingDivergedError: the non-finite streak exceeds the patience; names the phase,
                the iteration and the non-finite terms.
        """
        terms = nonfinite_terms(outputs)
        if not on_any_rank(bool(terms)):
            self.streak = 0
            return True
        self.streak += 1
        if self.streak > self.patience:
            named = ', '.join(f'{name}={value}' for name, value in terms.items())
            raise TrainingDivergedError(
                f'phase {phase}: the loss is non-finite at iteration {iteration} '
                f'({named or "on another rank"}), {self.streak} iteration(s) in a row '
                f'(nonfinite_patience={self.patience}); training stopped before any hook saw '
                f'this state, so the checkpoints already written hold the last finite one; '
                f'{self.WAYS_ON}')
        return False

    def check_applied_gradients(self, norm: torch.Tensor | None, skipped: bool, phase: str,
                                iteration: int) -> None:
        """A step that applied non-finite gradients (``norm``, their total norm, is NaN or inf
        and the optimiser skips no such step: ``skipped`` False) has made the weights
        non-finite while the loss was still finite: stop before any hook saves them.

        Raises:
            TrainingDivergedError: naming the phase, the iteration and the settings that skip
                such a step.
        """
        if norm is None or skipped or math.isfinite(float(norm)):
            return
        raise TrainingDivergedError(
            f'phase {phase}: the gradients are non-finite at iteration {iteration} (their norm '
            f'is {float(norm)}, the loss finite) and this optimiser\'s step applied them (a '
            "fused Adam or AdamW with clip_grad=dict(max_norm=...) skips such a step): the "
            'weights are no longer finite; training stopped before any hook saw this state, so '
            f'the checkpoints already written hold the last finite one; {self.WAYS_ON}')

    def check_phase_end(self, phase: str) -> None:
        """A phase may not end in a non-finite streak: its end would validate that state.

        Raises:
            TrainingDivergedError: naming the phase and the length of the streak.
        """
        if self.streak:
            raise TrainingDivergedError(
                f'phase {phase} ended with {self.streak} non-finite iteration(s) in a row; its '
                f'end is not validated nor saved; {self.WAYS_ON}')
