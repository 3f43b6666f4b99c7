"""Uniform segment sampling: segment centres in testing, a random offset per segment in training."""
from __future__ import annotations

import math

import pytest
import torch

from xmr.datasets.frame_sampling import uniform_frame_indices


def test_centres_of_twelve_segments_of_310_frames():
    # Segment length 310 / 12 = 25.833...; centre i = floor((i + 0.5) * 25.833...).
    assert uniform_frame_indices(310, 12, random_offset=False) == [
        12, 38, 64, 90, 116, 142, 167, 193, 219, 245, 271, 297]


def test_a_centre_that_falls_on_a_frame_is_that_frame():
    # (7 + 1/2) * 392 / 12 = 2940 / 12 = 245 exactly; 7.5 * (392 / 12) rounds to 244.999...
    assert uniform_frame_indices(392, 12, random_offset=False)[7] == 245
    # (5 + 1/2) * 30 / 11 = 165 / 11 = 15.
    assert uniform_frame_indices(30, 11, random_offset=False)[5] == 15


def test_short_clips_repeat_frames():
    assert uniform_frame_indices(4, 12, random_offset=False) == [0, 0, 0, 1, 1, 1, 2, 2, 2,
                                                                 3, 3, 3]
    assert uniform_frame_indices(1, 3, random_offset=True) == [0, 0, 0]


def test_docs_examples_a_ten_second_clip_and_a_five_frame_clip():
    # docs/data.md: a 10 s clip at 30 fps, segments of 25 frames, centres 12.5 + 25 i.
    assert uniform_frame_indices(300, 12, random_offset=False) == [12 + 25 * i for i in range(12)]
    # Five frames over 12 segments: centres 5 (i + 1/2) / 12 weigh the frames 2:3:2:3:2.
    indices = uniform_frame_indices(5, 12, random_offset=False)
    assert [indices.count(frame) for frame in range(5)] == [2, 3, 2, 3, 2]


def test_training_offsets_stay_inside_their_segment_and_follow_the_generator():
    generator = torch.Generator().manual_seed(3)
    draws = [uniform_frame_indices(310, 12, True, generator) for _ in range(50)]
    for indices in draws:
        for i, index in enumerate(indices):
            assert math.floor(i * 310 / 12) <= index < math.ceil((i + 1) * 310 / 12)
    assert len({tuple(d) for d in draws}) > 40
    offsets = torch.rand(12, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    expected = [math.floor((i + float(offsets[i])) * 310 / 12) for i in range(12)]
    assert uniform_frame_indices(310, 12, True, torch.Generator().manual_seed(5)) == expected


def test_invalid_counts_are_rejected():
    with pytest.raises(ValueError, match='at least one frame'):
        uniform_frame_indices(0, 12, False)
    with pytest.raises(ValueError, match='num_samples must be a positive int'):
        uniform_frame_indices(10, 0, False)


def test_a_fractional_frame_count_is_refused_naming_it():
    # 24 / 2 in a config is 12.0: torch.full((12.0,)) failed with a TypeError naming nothing.
    with pytest.raises(ValueError, match=r'num_samples must be a positive int, got 12\.0'):
        uniform_frame_indices(310, 12.0, False)


def test_an_offset_just_below_one_still_gives_an_index_inside_the_clip(monkeypatch):
    # u = 1 - 2**-53 is a value torch.rand can draw; T - 1 + u rounds to T in float64, so
    # floor((T - 1 + u) * N / T) lands on N itself, one past the last frame, but for the clamp.
    largest_below_one = 1.0 - 2.0 ** -53
    monkeypatch.setattr(torch, 'rand', lambda size, generator=None, dtype=None: torch.full(
        (size,), largest_below_one, dtype=dtype))
    indices = uniform_frame_indices(8, 4, random_offset=True)
    assert indices[-1] == 7 and max(indices) < 8
