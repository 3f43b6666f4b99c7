"""Small tensors made on the host for a step (sort indices, one-hots) on their way to the device."""
from __future__ import annotations

import torch


def host_to_device(values: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``values`` (on the host) on ``device``; to a GPU from pinned memory, so that the copy need
    not wait for the work queued before it."""
    # Compiled code has no pinned memory: the copy is a node of its graph.
    if device.type != 'cuda' or torch.compiler.is_compiling():
        return values.to(device)
    return values.pin_memory().to(device, non_blocking=True)
