"""Batches in pinned memory on a GPU machine, so that copying them to the device never blocks
the host.

The data preprocessors copy a batch with ``non_blocking=True``. From pinned (page-locked)
memory that copy is queued like a kernel and the host goes on queueing the step; from ordinary
memory it makes the host wait until the copy is done. A GPU step of xmr is bound by the host
(docs/benchmarks.md), so that wait is time lost.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def pinned_on_gpu(loader_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``loader_cfg`` with ``pin_memory`` on where a GPU is present, unless it sets its own."""
    return {'pin_memory': torch.cuda.is_available(), **loader_cfg}
