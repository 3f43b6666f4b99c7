"""Batch assembly for retrieval data."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from xmr.registry import FUNCTIONS


@FUNCTIONS.register_module()
def retrieval_collate(items: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """Collate dataset items into one batch dict.

    Tensors under ``media`` are stacked (``[B, 3, H, W]`` images or ``[B, T, 3, H, W]`` videos);
    every other key becomes a list of length ``B``. Items that a dataset skipped (``None``: an
    unreadable video under the ``skip`` policy) are dropped.

    Args:
        items: dataset items (see ``docs/data.md`` for their keys).

    Returns:
        The batch, with ``batch_size`` holding the number of kept items.
    """
    kept = [item for item in items if item is not None]
    batch: dict[str, Any] = {'batch_size': len(kept)}
    if not kept:
        return batch
    for key in kept[0]:
        values = [item[key] for item in kept]
        if key == 'media' and all(isinstance(v, torch.Tensor) for v in values):
            batch[key] = torch.stack(values)
        else:
            batch[key] = values
    return batch
