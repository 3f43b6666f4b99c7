"""SIGTERM ends a run at the end of its iteration, with that iteration's checkpoint written."""
from __future__ import annotations

import signal
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import torch.distributed as dist
from mmengine.dist import is_distributed
from mmengine.hooks import Hook

from xmr.engine.divergence import max_over_ranks
from xmr.engine.hooks.checkpoint import CheckpointHook
from xmr.engine.worker_signals import end_workers, ignore_in_workers
from xmr.models.losses.distributed import host_group
from xmr.registry import HOOKS

__all__ = ['PreemptionHook', 'end_persistent_workers', 'preemption_signals', 'workers_ignore']


@HOOKS.register_module()
class PreemptionHook(Hook):
    """Turns SIGTERM, which SLURM and Kubernetes send before they kill a job they preempt, into
    a checkpoint of the iteration under way, and a stop.

    Without it the process dies at once and loses every iteration since the last periodic
    checkpoint (up to ``checkpoint.interval``). With it, the iteration under way ends, its
    checkpoint is written through the run's :class:`CheckpointHook` (``last_checkpoint`` names
    it; an interim checkpoint, which counts towards no ``max_keep_ckpts``), training stops
    (:attr:`stopped_by` names the signal; the work dir gets no mark of a finished run), and
    ``tools/train.py`` exits with 143 (128 + SIGTERM) so that a scheduler sees a run cut
    short; ``--resume`` continues it as if uninterrupted. Between two phases the run stops
    before and after it sets up the next phase (:meth:`at_phase_boundary`), with the
    checkpoint of the phase's end. A signal that comes after the last iteration (during the
    final validation) stops nothing: the run finishes, says so in its log, and exits with 0.

    The handler only notes the signal. A scheduler signals every process of the job, and
    PyTorch's DataLoader workers die of SIGTERM, which would fail the step or the validation
    under way reading its batch: :class:`~xmr.engine.loops.PhasedTrainLoop` makes the workers of
    each phase and of the validation ignore these signals (:func:`workers_ignore`); they end
    with the main process. A signal during a validation lets it end; the run stops after the
    next iteration, or, at a phase's end, before the next phase's set-up. Under DDP the ranks
    agree after every iteration and between phases whether any received a signal (one integer
    exchanged on the host), so all stop at the same iteration and the main process writes its
    checkpoint, which the other ranks wait for before they end.

    Args:
        signals: names of the signals that stop the run this way.
    """

    priority = 'LOWEST'  # after CheckpointHook, which may have saved this iteration already

    def __init__(self, signals: Sequence[str] = ('SIGTERM',)) -> None:
        self.signals = [getattr(signal, name) for name in signals]
        self.received: int | None = None
        self.stopped_by: int | None = None
        self._previous: dict[int, Any] = {}

    def before_train(self, runner) -> None:
        self.received = self.stopped_by = None
        # Python delivers signals to the main thread only; a run driven from another thread
        # (a notebook's executor) keeps the default behaviour.
        if threading.current_thread() is threading.main_thread():
            self._previous = {number: signal.signal(number, self._note)
                              for number in self.signals}

    def _note(self, number: int, frame: Any) -> None:
        self.received = number

    def after_train_iter(self, runner, batch_idx: int, data_batch: Any = None,
                         outputs: Any = None) -> None:
        # The loop counts the iteration once its hooks have run.
        self._stop_if_signalled(runner, runner.iter + 1)

    def at_phase_boundary(self, runner) -> None:
        """Stop between two phases (xmr's hook point, called by
        :class:`~xmr.engine.loops.PhasedTrainLoop` before and after it sets up a phase that
        follows another): a signal noted during the phase end's validation or the set-up
        (building the phase's data and feature caches, which can take minutes) would otherwise
        wait for that set-up, the next phase's first validation and its first iteration, and
        the scheduler's kill may come first, losing every iteration since the last periodic
        checkpoint. The state here is that after ``runner.iter`` iterations, which the resumed
        run sets the phase up from again."""
        self._stop_if_signalled(runner, runner.iter)

    def _stop_if_signalled(self, runner, iterations: int) -> None:
        """Stop training, with the checkpoint of the state after ``iterations`` iterations,
        if any rank noted a signal."""
        loop = runner.train_loop
        if loop.stop_training:
            return
        # Under DDP the ranks agree (a scheduler's signals reach them apart): all stop here,
        # the checkpoint is written while every rank is still in step. A signal noted during
        # the exchange stays noted, for the next iteration's.
        agreed = max_over_ranks(self.received or 0)
        if not agreed:
            return
        self.received = agreed
        saver = next((hook for hook in runner.hooks if isinstance(hook, CheckpointHook)), None)
        if saver is not None and not str(getattr(saver, 'last_ckpt', '')).endswith(
                saver.filename_tmpl.format(iterations)):
            saver.save_interim_checkpoint(runner, iterations)
            if is_distributed():
                # A rank that ends now exits 143, and its launcher (torchrun, srun
                # --kill-on-bad-exit) then stops the others: the main process's file first.
                dist.barrier(group=host_group())
        runner.logger.warning(
            f'{signal.Signals(self.received).name} received: stopped after iteration '
            f'{iterations}' + (f', its checkpoint in {runner.work_dir}; continue with --resume'
                               if saver is not None else ' (no CheckpointHook: nothing was '
                               'saved)'))
        loop.stop_training = True
        self.stopped_by = self.received

    def after_train(self, runner) -> None:
        if self.received is not None and self.stopped_by is None:
            runner.logger.warning(
                f'{signal.Signals(self.received).name} received after the last iteration: '
                'training had finished; nothing was cut short')
        self.after_failed_train(runner)

    def after_failed_train(self, runner) -> None:
        # A run that raised must not keep swallowing SIGTERM.
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous = {}


def preemption_signals(runner) -> list[int]:
    """The signals a :class:`PreemptionHook` of ``runner`` turns into a stop (none without)."""
    return [number for hook in runner.hooks if isinstance(hook, PreemptionHook)
            for number in hook.signals]


#: The loaders with workers that :func:`workers_ignore` was given: their persistent workers end
#: with training (:func:`end_persistent_workers`).
_LOADERS_WITH_WORKERS: weakref.WeakSet = weakref.WeakSet()


def workers_ignore(loader: Any, signals: Sequence[int]) -> None:
    """Make ``loader``'s worker processes ignore ``signals`` (before they start), and end its
    persistent ones with :func:`end_persistent_workers`, with or without ``signals``."""
    if not getattr(loader, 'num_workers', 0):
        return
    _LOADERS_WITH_WORKERS.add(loader)
    ignore_in_workers(loader, signals)


def end_persistent_workers() -> None:
    """End the persistent workers of the loaders :func:`workers_ignore` was given (as training
    ends): they outlive their pass. Those ignoring SIGTERM would keep the process from exiting
    (at the interpreter's exit multiprocessing ends daemon processes with SIGTERM, then waits
    for them); the others, left to the garbage collection of their iterator's reference cycle,
    took 5 s each to end (torch's wait for a worker, ``MP_STATUS_CHECK_INTERVAL``)."""
    for loader in list(_LOADERS_WITH_WORKERS):
        end_workers(loader)
