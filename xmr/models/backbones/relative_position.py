"""Resizing Swin's relative-position bias tables to another window size.

A Swin block with window ``w`` holds a table ``[(2w-1)^2, heads]``: row
``(dh + w - 1) * (2w - 1) + (dw + w - 1)`` is the bias between two tokens ``dh`` rows and ``dw``
columns apart. Moving a checkpoint to another window (CCLM pre-trains at 224 px with window 7 and
retrieves at 384 px with window 12) resamples this ``(2w-1) x (2w-1)`` grid per head.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

#: Resampling schemes :func:`resize_relative_position_bias` knows.
INTERPOLATION_MODES = ('bicubic', 'geometric')


def table_side(table: torch.Tensor, name: str = 'relative_position_bias_table') -> int:
    """Side ``2w - 1`` of the square offset grid a ``[(2w-1)^2, heads]`` table covers."""
    if table.dim() != 2:
        raise ValueError(f'{name} must be [(2w-1)^2, heads], got shape {tuple(table.shape)}')
    side = math.isqrt(table.shape[0])
    if side * side != table.shape[0] or side % 2 == 0:
        raise ValueError(f'{name} has {table.shape[0]} rows, not (2w-1)^2 for a window w')
    return side


def _bicubic(grid: torch.Tensor, side: int) -> torch.Tensor:
    """``[heads, S, S]`` -> ``[heads, side, side]`` by bicubic resampling of the pixel grid."""
    return F.interpolate(grid[None], size=(side, side), mode='bicubic',
                         align_corners=False)[0]


def geometric_offsets(source_side: int, target_side: int) -> list[float]:
    """Positions of the source rows on the target's integer offset axis (BEiT's scheme).

    The source offsets ``1..k`` are stretched by a geometric progression of ratio ``q`` so that
    the near offsets stay close to their old places and the far ones spread out to reach the
    target's largest offset: ``sum_{i<k} q^i = target_side // 2``, ``q`` found by bisection on
    ``[1.01, 1.5]`` as in BEiT's fine-tuning code, which CCLM's checkpoint loader reuses.

    Returns:
        ``source_side`` increasing positions, symmetric around 0.
    """
    half_source, half_target = source_side // 2, target_side // 2
    low, high = 1.01, 1.5
    ratio = low
    while high - low > 1e-6:
        ratio = (low + high) / 2.0
        if (1.0 - ratio ** half_source) / (1.0 - ratio) > half_target:
            high = ratio
        else:
            low = ratio
    positive, position = [], 1.0
    for step in range(half_source):
        positive.append(position)
        position += ratio ** (step + 1)
    return [-p for p in reversed(positive)] + [0.0] + positive


def _geometric(grid: torch.Tensor, side: int) -> torch.Tensor:
    """``[heads, S, S]`` -> ``[heads, side, side]``: interpolating bicubic spline on BEiT's grid."""
    from scipy.interpolate import RectBivariateSpline

    source_side = grid.shape[-1]
    if side < source_side:
        raise ValueError(f'geometric resampling only enlarges a window (table side '
                         f'{source_side} -> {side}); use bicubic to shrink it')
    positions = geometric_offsets(source_side, side)
    half = side // 2
    targets = [float(offset) for offset in range(-half, half + 1)]
    heads = []
    for head in grid.double().cpu().numpy():
        # s=0 makes the spline pass through every source value (scipy's old interp2d 'cubic').
        spline = RectBivariateSpline(positions, positions, head, kx=3, ky=3, s=0)
        heads.append(torch.from_numpy(spline(targets, targets)))
    return torch.stack(heads)


def resize_relative_position_bias(table: torch.Tensor, window_size: int,
                                  mode: str = 'bicubic',
                                  name: str = 'relative_position_bias_table') -> torch.Tensor:
    """Resample a bias table to ``window_size``: ``[(2v-1)^2, H] -> [(2w-1)^2, H]``.

    Args:
        table: ``[(2v-1)^2, H]`` bias table of a block with window ``v``.
        window_size: target window ``w``.
        mode: ``'bicubic'`` (``F.interpolate`` over the offset grid, per head) or
            ``'geometric'`` (BEiT's geometric spacing and an interpolating bicubic spline, what
            CCLM's own loader does; enlarging only).
        name: key of the table, named in errors.

    Returns:
        ``[(2w-1)^2, H]`` table in ``table``'s dtype and device; ``table`` itself when the
        window already matches.
    """
    if mode not in INTERPOLATION_MODES:
        raise ValueError(f"unknown bias interpolation '{mode}'; choose one of "
                         f'{INTERPOLATION_MODES}')
    source_side = table_side(table, name)
    side = 2 * window_size - 1
    if source_side == side:
        return table
    heads = table.shape[1]
    grid = table.detach().float().t().reshape(heads, source_side, source_side)
    resized = _bicubic(grid, side) if mode == 'bicubic' else _geometric(grid, side)
    return resized.reshape(heads, side * side).t().contiguous().to(table.dtype).to(table.device)
