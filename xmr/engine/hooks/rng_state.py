"""Random-number state in checkpoints, so a resumed run draws what the uninterrupted one drew."""
from __future__ import annotations

from typing import Any

from mmengine.dist import get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log

from xmr.engine.rng import capture_rng_state, every_rank_rng_state
from xmr.registry import HOOKS


@HOOKS.register_module()
class RNGStateHook(Hook):
    """Saves every rank's torch / CUDA / NumPy / Python RNG states with each checkpoint and hands
    each rank its own back on resume.

    Rank 0 writes the checkpoint; the other ranks' states reach it through
    ``before_checkpoint_on_every_rank``, a hook point xmr's ``CheckpointHook`` calls on every
    rank before it saves (under ``randomness.diff_rank_seed=True`` the ranks' streams differ).
    ``checkpoint['rng_state']`` is the list of states in rank order. A checkpoint that another
    number of ranks wrote, one of an earlier xmr (one state) and a best checkpoint (saved when
    a validation decides, with rank 0's state alone) resume every rank from rank 0's states.
    A checkpoint written while a validation runs holds the streams training left to it.
    The states are applied by :class:`~xmr.engine.loops.PhasedTrainLoop`: for a phase resumed
    in its middle after it fast-forwards the phase's data, so draws made while skipping batches
    do not shift later ones; for one resumed where it begins before it sets the phase up, as
    the uninterrupted run did. A run that loads a checkpoint without resuming it (``load_from``
    alone) is a new run: it draws from its own ``randomness.seed``, not the checkpoint's streams.
    """

    priority = 'VERY_LOW'

    def __init__(self) -> None:
        self._gathered: list[dict[str, Any]] | None = None
        #: Training's streams while a validation runs (``None`` otherwise).
        self._training: dict[str, Any] | None = None

    def before_val(self, runner) -> None:
        # Checkpoints are written during a validation too: the best, and MMEngine's periodic
        # one again to record it. Training resumes from the streams the validation found (it
        # leaves them so), not from what its loader and model draw meanwhile.
        self._training = capture_rng_state()

    def after_val(self, runner) -> None:
        self._training = None

    def before_checkpoint_on_every_rank(self, runner) -> None:
        self._gathered = every_rank_rng_state(self._training)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        states, self._gathered = self._gathered, None
        checkpoint['rng_state'] = states or [self._training or capture_rng_state()]

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        loop = getattr(runner, '_train_loop', None)
        if ('rng_state' not in checkpoint or not hasattr(loop, 'pending_rng_state')
                or not runner._resume):
            return
        states = checkpoint['rng_state']
        states = [states] if isinstance(states, dict) else states
        world = get_world_size()
        if len(states) == world:
            loop.pending_rng_state = states[get_rank()]
            return
        if world > 1:
            print_log(f'the checkpoint holds the random states of {len(states)} rank(s), this '
                      f'run has {world}: every rank continues from rank 0\'s', logger='current',
                      level=30)
        loop.pending_rng_state = states[0]
