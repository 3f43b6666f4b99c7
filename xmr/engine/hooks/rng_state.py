"""Random-number state in checkpoints, so a resumed run draws what the uninterrupted one drew."""
from __future__ import annotations

from mmengine.hooks import Hook

from xmr.engine.rng import capture_rng_state
from xmr.registry import HOOKS


@HOOKS.register_module()
class RNGStateHook(Hook):
    """Saves torch / numpy / Python RNG states with each checkpoint and hands them back on resume.

    The states are applied by :class:`~xmr.engine.loops.PhasedTrainLoop` after it fast-forwards
    the phase's data, so draws made while skipping batches do not shift later ones.
    """

    priority = 'VERY_LOW'

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint['rng_state'] = capture_rng_state()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        loop = getattr(runner, '_train_loop', None)
        if 'rng_state' in checkpoint and hasattr(loop, 'pending_rng_state'):
            loop.pending_rng_state = checkpoint['rng_state']
