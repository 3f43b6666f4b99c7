"""Uniform segment sampling of video frames (TSN's segments; DASD says 12 uniform frames).

A clip of ``N`` frames is cut into ``T`` equal segments ``[i N / T, (i + 1) N / T)``; one frame is
taken from each: at a random offset inside the segment when training, at the segment centre when
testing. With ``N < T`` segments are shorter than a frame and frames repeat, so every clip yields
exactly ``T`` indices. CLIP4Clip's code, whose mean pooling DASD follows, picks other frames (one
per second, then ``linspace``; ``docs/data.md``, "Video pipeline").
"""
from __future__ import annotations

from typing import Any

import torch

from xmr.utils.counts import is_count

__all__ = ['check_frame_count', 'uniform_frame_indices']


def check_frame_count(value: Any, name: str) -> int:
    """``value`` as a frame count ``T``, or a ValueError saying what ``name`` must be.

    Raises:
        ValueError: unless ``value`` is a positive integer. A float (``24 / 2`` in a config)
            would fail later in torch with a TypeError naming nothing; a bool is an int to
            Python but no frame count.
    """
    if not is_count(value):
        raise ValueError(f'{name} must be a positive int, got {value!r}')
    return int(value)


def uniform_frame_indices(num_video_frames: int, num_samples: int, random_offset: bool,
                          generator: torch.Generator | None = None) -> list[int]:
    """Frame indices, one per segment, in temporal order.

    ``index_i = min(N - 1, floor((i + u_i) * N / T))`` with ``u_i ~ U[0, 1)`` when
    ``random_offset`` else ``u_i = 0.5``.

    Args:
        num_video_frames: ``N``, frames in the clip.
        num_samples: ``T``, frames to return.
        random_offset: training (random offset) or testing (segment centre).
        generator: torch generator for the offsets (default: torch's global RNG, which a
            dataset seeds per item: :func:`~xmr.datasets.sample_keys.sample_draws`).

    Returns:
        ``T`` indices in ``[0, N)``, non-decreasing.

    Raises:
        ValueError: if ``N`` is not positive, or ``T`` not a positive integer.
    """
    if num_video_frames <= 0:
        raise ValueError(f'a clip needs at least one frame, got {num_video_frames}')
    check_frame_count(num_samples, 'num_samples')
    if random_offset:
        offsets = torch.rand(num_samples, generator=generator, dtype=torch.float64)
    else:
        offsets = torch.full((num_samples,), 0.5, dtype=torch.float64)
    # Times N, then over T: (i + 1/2) N is exact, so a centre that falls on a frame is that
    # frame; times N / T rounded first, it can land a hair below and floor to the one before.
    positions = (torch.arange(num_samples, dtype=torch.float64) + offsets) * num_video_frames \
        / num_samples
    return positions.floor().long().clamp_(max=num_video_frames - 1).tolist()
