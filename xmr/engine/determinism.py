"""Deterministic runs on CUDA: cuBLAS's workspace setting, made before CUDA starts.

``randomness = dict(deterministic=True)`` makes MMEngine's runner call
``torch.use_deterministic_algorithms(True)``. torch then refuses every cuBLAS matrix product on
CUDA >= 10.2 (a ``RuntimeError`` at the first step, after the model was built and its weights
loaded) unless the environment variable ``CUBLAS_WORKSPACE_CONFIG`` is ``:4096:8`` or ``:16:8``,
cuBLAS's fixed workspaces (torch's "Reproducibility" notes). torch reads the variable once, at
the process's first cuBLAS call, so ``tools/train.py``, ``tools/test.py`` and
``tools/cache_features.py`` call :func:`prepare_deterministic_cuda`
(:func:`~xmr.engine.process.prepare_process`) as the config is loaded,
before anything can touch the GPU: DDP's device set-up, the model's move, a checkpoint's load.
"""
from __future__ import annotations

import os
from typing import Any

import torch
from mmengine.logging import print_log

from xmr.utils.cli import UserError

__all__ = ['CUBLAS_WORKSPACE_CONFIG', 'DETERMINISTIC_CUBLAS_WORKSPACES',
           'prepare_deterministic_cuda']

CUBLAS_WORKSPACE_CONFIG = 'CUBLAS_WORKSPACE_CONFIG'
#: The settings torch accepts in deterministic mode; the first is set where none is: 8 buffers
#: of 4 MiB per stream (``:16:8``, 8 of 16 KiB, saves memory and may be slower).
DETERMINISTIC_CUBLAS_WORKSPACES = (':4096:8', ':16:8')


def prepare_deterministic_cuda(cfg: Any) -> None:
    """Make a run of ``cfg`` with ``randomness.deterministic=True`` able to multiply on CUDA.

    Sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` where it is unset or empty and keeps ``:16:8``
    (the user's choice). A run that is not deterministic leaves the environment alone and takes
    torch out of the deterministic mode an earlier run in this process left on (MMEngine's
    runner only ever turns it on: a sweep or notebook ran every later run deterministic, slower
    or refused by an op without a deterministic kernel, its log saying otherwise). Call it
    before the process's first CUDA operation.

    Raises:
        UserError: any other value, which every CUDA matrix product of the run would refuse,
            naming the variable, its value and the fixes.
    """
    if not (cfg.get('randomness') or {}).get('deterministic'):
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
        return
    value = os.environ.get(CUBLAS_WORKSPACE_CONFIG)
    if value in DETERMINISTIC_CUBLAS_WORKSPACES:
        return
    if value:
        raise UserError(f'{CUBLAS_WORKSPACE_CONFIG}={value}', 'randomness.deterministic=True '
                        'needs cuBLAS in a deterministic workspace, and torch refuses every CUDA '
                        'matrix product with this one', f'set {CUBLAS_WORKSPACE_CONFIG} to one of '
                        f'{" or ".join(DETERMINISTIC_CUBLAS_WORKSPACES)}, unset it (xmr then sets '
                        f'{DETERMINISTIC_CUBLAS_WORKSPACES[0]}), or set '
                        'randomness.deterministic=False')
    os.environ[CUBLAS_WORKSPACE_CONFIG] = DETERMINISTIC_CUBLAS_WORKSPACES[0]
    print_log(f'randomness.deterministic=True: {CUBLAS_WORKSPACE_CONFIG} set to '
              f'{DETERMINISTIC_CUBLAS_WORKSPACES[0]} (torch refuses CUDA matrix products in '
              f'deterministic mode without it); set it to {DETERMINISTIC_CUBLAS_WORKSPACES[1]} '
              'yourself for smaller cuBLAS workspaces', logger='current')
