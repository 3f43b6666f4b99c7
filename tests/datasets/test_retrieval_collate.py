"""retrieval_collate: stacking, skipped items dropped and listed."""
from __future__ import annotations

import torch

from xmr.datasets import SkippedMedia, retrieval_collate


def test_stacks_media_and_lists_the_rest():
    items = [{'media': torch.full((2, 3, 4, 4), i, dtype=torch.uint8), 'media_id': str(i),
              'captions': {'en': [f'c{i}']}, 'index': i} for i in range(3)]
    batch = retrieval_collate(items)
    assert batch['batch_size'] == 3 and batch['media'].shape == (3, 2, 3, 4, 4)
    assert batch['media'][:, 0, 0, 0, 0].tolist() == [0, 1, 2]
    assert batch['captions'] == [{'en': ['c0']}, {'en': ['c1']}, {'en': ['c2']}]
    assert 'skipped_media' not in batch


def test_cached_features_are_stacked_into_one_tensor():
    items = [{'media': None, 'source_features': torch.full((4,), float(i)),
              'media_features': torch.full((4,), -float(i)), 'index': i} for i in range(3)]
    batch = retrieval_collate(items)
    assert batch['media'] is None
    assert batch['source_features'].shape == batch['media_features'].shape == (3, 4)
    assert batch['source_features'][:, 0].tolist() == [0.0, 1.0, 2.0]
    assert batch['media_features'][:, 3].tolist() == [0.0, -1.0, -2.0]


def test_none_and_markers_are_dropped_and_markers_named():
    item = {'media': torch.zeros(3, 2, 2, dtype=torch.uint8), 'media_id': 'a', 'index': 0}
    batch = retrieval_collate([None, item, SkippedMedia(2, '/v/bad.mp4', 'decoding failed')])
    assert batch['batch_size'] == 1 and batch['media_id'] == ['a']
    assert batch['skipped_media'] == ['/v/bad.mp4']
    assert retrieval_collate([SkippedMedia(0, 'x', 'y')]) == {'batch_size': 0,
                                                              'skipped_media': ['x']}
