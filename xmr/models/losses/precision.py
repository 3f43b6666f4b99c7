"""Losses in fp32 under autocast on every device: one decorator for their similarity-to-loss part.

Autocast's lists of fp32 ops differ by device. CUDA's holds the reductions and transcendentals
(``sum``, ``softmax``, ``exp``, ``log``, ``pow``, ...); the CPU's holds only the loss functions
(``cross_entropy``, ``mse_loss``, ...). A loss under CPU autocast therefore summed its hinge
terms, took its log-sigmoids and its variances in bf16 and came out in bf16, where a GPU
computed most of that in fp32: values tested on a CPU were not those a GPU trains with.

:func:`in_fp32` runs the part of a loss that turns scores or token statistics into the scalar
with autocast off and its half-precision tensor arguments cast up, on CPU and CUDA alike. The
products before it (a similarity matrix, a patch–word einsum) stay in the autocast dtype on both
devices, where the speed is. Gradients flow back into the half-precision inputs through the
casts; without autocast, on fp32 inputs, it changes nothing.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ['in_fp32']

Function = TypeVar('Function', bound=Callable[..., Any])

HALF_DTYPES = (torch.float16, torch.bfloat16)


def in_fp32(function: Function) -> Function:
    """Decorate a loss's similarity-to-loss function to run in fp32 under any autocast.

    Its fp16 and bf16 tensor arguments (positional or keyword) are cast to fp32, and autocast is
    off on CPU and CUDA while it runs; other arguments (fp32, bool and integer tensors, numbers)
    pass as they are.
    """
    @functools.wraps(function)
    def fp32_function(*args: Any, **kwargs: Any) -> Any:
        # Both devices' autocast off, whichever is on: written out, as compiled code traces it.
        with torch.autocast('cpu', enabled=False), torch.autocast('cuda', enabled=False):
            return function(*map(_fp32, args), **{k: _fp32(v) for k, v in kwargs.items()})

    return fp32_function


def _fp32(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in HALF_DTYPES:
        return value.float()
    return value
