"""Every random stream of a run (torch, CUDA, NumPy, Python), captured and restored as one."""
from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch


@contextmanager
def preserved_rng_state() -> Iterator[None]:
    """Run a block (validation) without disturbing any random stream of training."""
    state = capture_rng_state()
    try:
        yield
    finally:
        restore_rng_state(state)


def capture_rng_state() -> dict[str, Any]:
    state = dict(torch=torch.get_rng_state(), numpy=np.random.get_state(),
                 python=random.getstate())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`capture_rng_state`'s streams; the torch states may come from a
    checkpoint loaded onto the GPU, and torch takes them as CPU byte tensors only."""
    torch.set_rng_state(state['torch'].cpu())
    np.random.set_state(state['numpy'])
    random.setstate(state['python'])
    if 'cuda' in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([device_state.cpu() for device_state in state['cuda']])
