"""Every random stream of a run (torch, CUDA, NumPy, Python), captured and restored as one."""
from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from mmengine.dist import get_world_size, is_distributed

from xmr.models.losses.distributed import host_group


@contextmanager
def preserved_rng_state() -> Iterator[None]:
    """Run a block (validation) without disturbing any random stream of training."""
    state = capture_rng_state()
    try:
        yield
    finally:
        restore_rng_state(state)


def capture_rng_state() -> dict[str, Any]:
    """This process's streams: torch's, NumPy's, Python's and its own GPU's (``cuda``).

    Only the current device's CUDA stream: a process trains on one GPU (its ``LOCAL_RANK``'s
    under DDP), and a state per visible device would neither fit a machine that shows fewer
    GPUs nor be this rank's (rank 0's list holds the other GPUs' unused streams).
    """
    state = dict(torch=torch.get_rng_state(), numpy=np.random.get_state(),
                 python=random.getstate())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state()
    return state


def every_rank_rng_state(state: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Each process's ``state`` (default: :func:`capture_rng_state`), in rank order; ``[this
    process's]`` without DDP. A collective: every rank calls it at once. Exchanged through the
    host's gloo group (:func:`~xmr.models.losses.distributed.host_group`), the states being
    host tensors."""
    state = capture_rng_state() if state is None else state
    if not is_distributed():
        return [state]
    states: list[Any] = [None] * get_world_size()
    dist.all_gather_object(states, state, group=host_group())
    return states


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`capture_rng_state`'s streams, the CUDA one onto the current device; the
    torch states may come from a checkpoint loaded onto the GPU, and torch takes them as CPU
    byte tensors only. A checkpoint of an earlier xmr holds a CUDA state per visible device:
    the current device's is taken, if it has one."""
    torch.set_rng_state(state['torch'].cpu())
    np.random.set_state(state['numpy'])
    random.setstate(state['python'])
    cuda = state.get('cuda')
    if cuda is None or not torch.cuda.is_available():
        return
    if isinstance(cuda, (list, tuple)):
        device = torch.cuda.current_device()
        cuda = cuda[device] if device < len(cuda) else None
    if cuda is not None:
        torch.cuda.set_rng_state(cuda.cpu())
