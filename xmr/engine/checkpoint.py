"""Loading MMEngine checkpoints on torch >= 2.6, where ``torch.load`` defaults to weights only.

MMEngine 0.10.7 calls ``torch.load`` without ``weights_only``, so torch >= 2.6 unpickles every
checkpoint with its weights-only unpickler. Besides tensors, an xmr checkpoint holds numpy
arrays and scalars (RNG states, metric values) and, once
:class:`~xmr.engine.hooks.WeightsOnlyCheckpointHook` has flattened them, no other objects.
xmr allow-lists exactly those numpy types instead of turning the safety check off.
:func:`state_dict_mismatches` says how a checkpoint's weights differ from a model's, for the
strict resume of :class:`~xmr.engine.hooks.CheckpointHook`.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping

import numpy as np
import torch

_REGISTERED = False


def _numpy_multiarray():
    """``numpy._core.multiarray`` (numpy 2) or ``numpy.core.multiarray`` (numpy 1)."""
    for name in ('numpy._core.multiarray', 'numpy.core.multiarray'):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError('numpy has neither _core.multiarray nor core.multiarray')


def allow_mmengine_checkpoint_types() -> None:
    """Add the numpy types xmr checkpoints contain to torch's weights-only allow-list.

    Idempotent; call it before ``Runner.resume`` / ``load_checkpoint`` (``tools/train.py`` and
    ``tools/test.py`` do).
    """
    global _REGISTERED
    if _REGISTERED:
        return
    multiarray = _numpy_multiarray()
    dtype_classes = [type(np.dtype(kind)) for kind in (
        'float16', 'float32', 'float64', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint32',
        'uint64', 'bool')]
    torch.serialization.add_safe_globals(
        [np.ndarray, np.dtype, multiarray._reconstruct, multiarray.scalar, *dtype_classes])
    _REGISTERED = True


def state_dict_mismatches(expected: Mapping[str, torch.Tensor],
                          loaded: Mapping[str, torch.Tensor], shown: int = 3) -> list[str]:
    """How ``loaded`` differs from ``expected``: missing, unexpected and differently shaped keys.

    Args:
        expected: the model's state dict.
        loaded: the checkpoint's state dict (``module.`` prefixes already stripped).
        shown: keys listed per kind; the count is always complete.

    Returns:
        One line per kind of difference, e.g. ``2 keys of other shapes: a.weight (checkpoint
        [4, 8], model [4, 16]), ...``; empty when the two match.
    """
    def line(kind: str, items: list[str]) -> list[str]:
        more = f', ... ({len(items) - shown} more)' if len(items) > shown else ''
        return [f'{len(items)} {kind}: {", ".join(items[:shown])}{more}'] if items else []

    shapes = [f'{key} (checkpoint {list(loaded[key].shape)}, model {list(value.shape)})'
              for key, value in expected.items()
              if key in loaded and hasattr(loaded[key], 'shape')
              and tuple(loaded[key].shape) != tuple(value.shape)]
    return (line('keys of other shapes', shapes)
            + line('keys missing from the checkpoint',
                   [key for key in expected if key not in loaded])
            + line('keys the model does not have', [key for key in loaded if key not in expected]))
