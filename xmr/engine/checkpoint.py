"""Loading MMEngine checkpoints on torch >= 2.6, where ``torch.load`` defaults to weights only.

MMEngine 0.10.7 pickles its ``HistoryBuffer``s, numpy scalars and config objects into every
checkpoint and calls ``torch.load`` without ``weights_only``; torch >= 2.6 then refuses them,
breaking ``--resume`` and ``load_from``. xmr allow-lists exactly the types MMEngine writes
instead of turning the safety check off.
"""
from __future__ import annotations

import collections

import numpy as np
import torch

_REGISTERED = False


def allow_mmengine_checkpoint_types() -> None:
    """Add the non-tensor types MMEngine saves to torch's weights-only allow-list (idempotent)."""
    global _REGISTERED
    if _REGISTERED or not hasattr(torch.serialization, 'add_safe_globals'):
        return
    from mmengine.config import ConfigDict
    from mmengine.logging import HistoryBuffer

    allowed: list = [HistoryBuffer, ConfigDict, collections.OrderedDict, collections.defaultdict,
                     np.ndarray, np.dtype, np.core.multiarray._reconstruct
                     if hasattr(np, 'core') else None, np.random.mtrand.RandomState]
    for name in ('_core.multiarray._reconstruct', 'core.multiarray._reconstruct',
                 '_core.multiarray.scalar', 'core.multiarray.scalar'):
        module_path, attr = name.rsplit('.', 1)
        try:
            module = np
            for part in module_path.split('.'):
                module = getattr(module, part)
            allowed.append(getattr(module, attr))
        except AttributeError:
            continue
    allowed.extend(type(np.dtype(kind)) for kind in ('float64', 'float32', 'int64', 'int32',
                                                     'bool', 'uint32', 'uint8'))
    torch.serialization.add_safe_globals([a for a in allowed if a is not None])
    _REGISTERED = True
