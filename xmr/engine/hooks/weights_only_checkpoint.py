"""Keeps xmr's checkpoints loadable by ``torch.load(weights_only=True)`` (torch >= 2.6).

MMEngine stores its message hub's ``HistoryBuffer``s in every checkpoint, and a pickled
``HistoryBuffer`` carries its statistics methods, which unpickle through ``builtins.getattr``.
Allow-listing ``getattr`` would let any checkpoint reach arbitrary code, so instead the buffers
are written as plain arrays and rebuilt when a checkpoint is loaded; everything else in the
file is tensors, numbers, strings and the numpy types of
:func:`xmr.engine.checkpoint.allow_mmengine_checkpoint_types`.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from mmengine.hooks import Hook
from mmengine.logging import HistoryBuffer

from xmr.registry import HOOKS

#: Marks a ``HistoryBuffer`` stored as plain data.
BUFFER_TAG = '__xmr_history_buffer__'


def buffer_to_plain(buffer: HistoryBuffer) -> dict[str, Any]:
    """A ``HistoryBuffer`` as arrays and its window length."""
    values, counts = buffer.data
    return {BUFFER_TAG: True, 'values': np.asarray(values), 'counts': np.asarray(counts),
            'max_length': int(buffer.max_length)}


def plain_to_buffer(plain: dict[str, Any]) -> HistoryBuffer:
    """Inverse of :func:`buffer_to_plain`."""
    return HistoryBuffer(plain['values'], plain['counts'], plain['max_length'])


@HOOKS.register_module()
class WeightsOnlyCheckpointHook(Hook):
    """Stores the message hub's history buffers as plain data and restores them on load."""

    priority = 'VERY_HIGH'

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        scalars = checkpoint.get('message_hub', {}).get('log_scalars', {})
        for key, value in scalars.items():
            if isinstance(value, HistoryBuffer):
                scalars[key] = buffer_to_plain(value)

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        scalars = checkpoint.get('message_hub', {}).get('log_scalars', {})
        for key, value in scalars.items():
            if isinstance(value, dict) and value.get(BUFFER_TAG):
                scalars[key] = plain_to_buffer(value)
