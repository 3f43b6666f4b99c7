"""How many threads torch runs on the CPU: chosen by the tools, overridable.

torch defaults to one intra-op thread per core. On a small machine that is the slowest choice:
with 2 cores, two threads synchronise at every one of the many small ops of a tiny model, and a
thread that waits spins (OpenMP), so whatever else runs (data loading, the system, other jobs)
preempts one thread and the other burns its core waiting. On the demo's source_finetune step
(2 shared cores, load ~6) two threads took 7.4 s and 2.5 CPU-s per step, one thread 1.3 s and
0.4 CPU-s (docs/getting_started.md). ``tools/train.py``, ``tools/test.py`` and
``tools/cache_features.py`` therefore set the count themselves
(:func:`~xmr.engine.process.prepare_process`), in this order:

1. ``OMP_NUM_THREADS`` in the environment (the user's word for this run), but for the 1 that
   ``tools/dist_train.sh`` sets, as torchrun would, where its caller set none
   (:data:`CALLER_SET_NO_OMP`);
2. ``cpu_threads = N`` in the config;
3. the cores this process may use, divided among the local processes (DDP), less one core left
   for data loading and the system; at least 1.

The count is the main process's. DataLoader workers are forked from it, and GNU OpenMP (torch's
and faiss's, each wheel its own copy) is not fork-safe: once the parent has run a parallel region,
a worker that runs one with more than one thread hangs (its pool's threads were not forked).
PyTorch sets one thread in each worker, and no xmr worker code calls faiss; keep it so (no
``torch.set_num_threads(n > 1)`` in a ``worker_init_fn``, no faiss search in a dataset or
collate), or give that loader ``multiprocessing_context='spawn'``.
"""
from __future__ import annotations

import os
from typing import Any

import torch
from mmengine.logging import print_log

from xmr.utils.cli import UserError

__all__ = ['CALLER_SET_NO_OMP', 'available_cores', 'choose_cpu_threads', 'set_cpu_threads']

#: Set to ``1`` by ``tools/dist_launch.sh`` where its caller set no ``OMP_NUM_THREADS``: it then
#: sets that to 1 (as torchrun would, with a warning, in every process it starts), a default that
#: is not the user's word, and would silence ``cpu_threads`` and the share of the cores.
CALLER_SET_NO_OMP = 'XMR_CALLER_SET_NO_OMP_NUM_THREADS'


def available_cores() -> int:
    """The cores this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, 'sched_getaffinity'):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def choose_cpu_threads(configured: Any = None, local_processes: int = 1) -> tuple[int, str]:
    """The intra-op thread count and why (see the module docstring for the order).

    Args:
        configured: ``cpu_threads`` of the config (``None``: not set).
        local_processes: processes of the run on this machine (DDP ``LOCAL_WORLD_SIZE``).

    Returns:
        ``(threads, reason)``.

    Raises:
        UserError: ``OMP_NUM_THREADS`` or ``cpu_threads`` that is not a positive integer.
    """
    # Checked though the environment wins: else the config fails only on a machine without it.
    from_config = None if configured is None else _positive(configured, 'cpu_threads')
    from_env = (None if os.environ.get(CALLER_SET_NO_OMP) == '1'
                else os.environ.get('OMP_NUM_THREADS'))
    if from_env:
        return _positive(from_env, 'OMP_NUM_THREADS'), 'OMP_NUM_THREADS'
    if from_config is not None:
        return from_config, 'cpu_threads in the config'
    cores = available_cores()
    threads = max(1, cores // max(1, local_processes) - 1)
    return threads, (f'{cores} cores for {local_processes} local process(es), one left for data '
                     'loading and the system')


def set_cpu_threads(cfg: Any) -> int:
    """Choose and apply the thread count for a run of ``cfg``; log it with how to override it."""
    threads, reason = choose_cpu_threads(cfg.get('cpu_threads'),
                                         int(os.environ.get('LOCAL_WORLD_SIZE', 1)))
    torch.set_num_threads(threads)
    print_log(f'torch CPU threads: {threads} ({reason}); override with OMP_NUM_THREADS=N or '
              'cpu_threads = N in the config', logger='current')
    return threads


def _positive(value: Any, where: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or str(number) != str(value).strip():
        raise UserError(where, f'{value!r} is not a number of threads', 'give a positive integer')
    return number
