"""retrieval_collate: stacking, skipped items dropped and listed."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
import torch

from xmr.datasets import SkippedMedia, retrieval_collate
from xmr.datasets.collate import kept_no_item


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
    assert kept_no_item(retrieval_collate([SkippedMedia(0, 'x', 'y')]))
    assert not kept_no_item(batch) and not kept_no_item([item])


def test_media_ids_become_keys_equal_for_one_id_in_any_process():
    """Each key is the id's 8-byte BLAKE2b digest read as a signed little-endian integer, so a
    process with another string hash seed (a worker, another rank) computes the same keys."""
    ids = ['1000092795', 'COCO_val2014_000000000042', '1000092795']
    batch = retrieval_collate([{'media_id': media_id} for media_id in ids])
    digest = hashlib.blake2b(b'1000092795', digest_size=8).digest()
    first = int.from_bytes(digest, 'little') - (1 << 64) * (digest[-1] >= 128)
    assert batch['media_keys'].dtype == torch.int64
    assert batch['media_keys'].tolist()[0] == batch['media_keys'].tolist()[2] == first
    assert batch['media_keys'][1] != first
    other_process = subprocess.run(
        [sys.executable, '-c', 'from xmr.datasets import retrieval_collate; print(retrieval_'
         f'collate([{{"media_id": i}} for i in {ids!r}])["media_keys"].tolist())'],
        capture_output=True, text=True, check=True,
        env={**os.environ, 'PYTHONHASHSEED': '12345'}).stdout
    assert other_process.strip() == str(batch['media_keys'].tolist())
    assert 'media_keys' not in retrieval_collate([{'index': 0}])


def _pair(index: int, **extra) -> dict:
    return {'media': None, 'media_id': f'm{index}', 'source_text': f'en {index}',
            'target_text': f'de {index}', 'lang': 'de', 'index': index, **extra}


def test_items_with_other_keys_than_the_first_are_refused_naming_both():
    """A ConcatDataset of a pair dataset with translated_texts and one without: the batch kept
    the first item's keys, so a key the first item lacked vanished from the batch without a
    word, and one it alone had stopped with a bare KeyError."""
    with pytest.raises(ValueError, match=r"dataset item 1 has \['source_to_target_text'\], "
                       r"which item 0 lacks: .*translated_texts"):
        retrieval_collate([_pair(0), _pair(1, source_to_target_text='mt 1')])
    with pytest.raises(ValueError, match=r"dataset item 1 lacks \['source_to_target_text'\], "
                       r"which item 0 has"):
        retrieval_collate([_pair(0, source_to_target_text='mt 0'), _pair(1)])
    # A skipped item is no item: the kept ones agree.
    batch = retrieval_collate([_pair(0, source_to_target_text='mt 0'),
                               SkippedMedia(3, 'x.jpg', 'empty'),
                               _pair(4, source_to_target_text='mt 4')])
    assert batch['source_to_target_text'] == ['mt 0', 'mt 4']


def test_media_of_other_shapes_are_refused_naming_both_items_and_shapes():
    """A ConcatDataset of children resized otherwise: torch.stack's error named positions in
    the batch, not the items or what to change."""
    from xmr.datasets.concat import ConcatDataset

    concat = ConcatDataset([
        dict(type='SyntheticPairDataset', num_scenes=2, languages=['de'], image_size=32),
        dict(type='SyntheticPairDataset', num_scenes=2, languages=['de'], image_size=48)])
    first, last = concat[0], concat[len(concat) - 1]
    with pytest.raises(ValueError, match=rf"dataset item {len(concat) - 1} has media of shape "
                       r"\[3, 48, 48\], item 0 \[3, 32, 32\]: .*one transform size"):
        retrieval_collate([first, last])
    videos = [_pair(index, media=torch.zeros(frames, 3, 8, 8)) for index, frames in
              ((0, 4), (1, 4), (2, 8))]
    assert retrieval_collate(videos[:2])['media'].shape == (2, 4, 3, 8, 8)
    with pytest.raises(ValueError, match=r'item 2 has media of shape \[8, 3, 8, 8\], item 0 '
                       r'\[4, 3, 8, 8\]'):
        retrieval_collate(videos)
