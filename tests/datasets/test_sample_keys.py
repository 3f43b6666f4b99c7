"""An item's random draws as a function of (seed, epoch, index), whichever worker loads it."""
from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
import torch
from mmengine.dataset import DefaultSampler
from torch.utils.data import DataLoader

from tests.engine.test_loops import augmented_images
from xmr.datasets import (
    CaptionPairDataset,
    SampleIndex,
    retrieval_collate,
    sample_draws,
    uniform_frame_indices,
)
from xmr.engine.resume import pass_indices


@pytest.fixture(scope='module')
def augmented(tmp_path_factory) -> CaptionPairDataset:
    """Six random images read with crops of a third and up and flips: two draws of one item
    agree by chance almost never."""
    cfg = augmented_images(tmp_path_factory.mktemp('augmented'), count=6)
    return CaptionPairDataset(**{key: value for key, value in cfg.items() if key != 'type'})


def streams() -> tuple:
    return torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()


def test_a_keyed_item_draws_its_key_s_media_and_leaves_the_process_streams_alone(augmented):
    torch.manual_seed(0)
    before = streams()
    first = augmented[SampleIndex(2, seed=3, epoch=1)]['media']
    after = streams()
    assert torch.equal(after[0], before[0]) and np.array_equal(after[1], before[1])
    assert after[2] == before[2]
    torch.manual_seed(1)  # another process state: the key alone decides
    assert torch.equal(augmented[SampleIndex(2, seed=3, epoch=1)]['media'], first)
    for other in (SampleIndex(2, seed=3, epoch=2), SampleIndex(2, seed=4, epoch=1)):
        assert not torch.equal(augmented[other]['media'], first)


def test_frame_offsets_and_every_stream_follow_the_key():
    """Each stream follows the item's key and nothing else: the same under two process seeds,
    other for another index, epoch or seed (every stream seeded alike would augment every
    item as the first)."""
    def draws(process_seed: int, index: int = 7, seed: int = 5, epoch: int = 0) -> tuple:
        torch.manual_seed(process_seed)
        np.random.seed(process_seed)
        random.seed(process_seed)
        with sample_draws(SampleIndex(index, seed=seed, epoch=epoch)):
            return (uniform_frame_indices(300, 12, random_offset=True),
                    float(np.random.random()), random.random())

    first = draws(0)
    assert draws(1) == first
    for other in (draws(0, index=8), draws(0, epoch=1), draws(0, seed=6)):
        assert all(mine != theirs for mine, theirs in zip(other, first))


def test_a_sample_index_is_its_int_and_pickles_with_its_key():
    index = pickle.loads(pickle.dumps(SampleIndex(5, seed=7, epoch=2)))
    assert (index, index.seed, index.epoch) == (5, 7, 2)
    assert np.arange(10)[index] == 5


def _media_per_item(dataset: CaptionPairDataset, num_workers: int) -> dict:
    """Each item's media in passes 0 and 1 of a shuffled loader with ``num_workers``."""
    sampler = DefaultSampler(dataset, shuffle=True, seed=3)
    loader = DataLoader(dataset, batch_size=2, sampler=sampler, num_workers=num_workers,
                        persistent_workers=num_workers > 0, collate_fn=retrieval_collate)
    pass_indices(loader)
    media = {}
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        for batch in loader:
            media.update({(epoch, index): item for index, item in zip(batch['index'],
                                                                       batch['media'])})
    return media


def test_two_persistent_workers_draw_each_item_s_media_as_the_main_process_does(augmented):
    torch.manual_seed(0)
    alone = _media_per_item(augmented, num_workers=0)
    torch.manual_seed(1)
    workers = _media_per_item(augmented, num_workers=2)
    assert sorted(alone) == sorted(workers) == [(e, i) for e in (0, 1) for i in range(6)]
    assert [key for key in alone if not torch.equal(alone[key], workers[key])] == []
    assert any(not torch.equal(alone[0, i], alone[1, i]) for i in range(6))


def test_a_keyed_item_records_its_index_as_a_plain_int(augmented, tmp_path):
    """The key stays with the loading: an item (and so a batch, a hook's record of it, anything
    saved of it) holds the plain index, which ``torch.load(weights_only=True)`` reads back."""
    item = augmented[SampleIndex(2, seed=3, epoch=1)]

    assert type(item['index']) is int and item['index'] == 2
    torch.save([item['index']], tmp_path / 'indices.pt')
    assert torch.load(tmp_path / 'indices.pt', weights_only=True) == [2]
