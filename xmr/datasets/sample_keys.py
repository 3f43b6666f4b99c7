"""An item's random draws (augmentation, video frame offsets) as a function of its sample key.

A training item's draws are a pure function of ``(seed, epoch, index)``: the seed and epoch of
the pass its index was drawn for and the index itself. They do not depend on which DataLoader
worker loads the item, how many workers there are, whether they persist across passes, or
whether the run resumed in the middle of a pass (a resumed run's workers start afresh, where
the uninterrupted run's had drawn for every item before).

The key travels with the index: the sampler side yields :class:`SampleIndex` (an ``int`` that
also carries the pass's seed and epoch), which a worker receives as it is, and the dataset
loads the item's media inside :func:`sample_draws`. ``PassIndices``
(:mod:`xmr.engine.resume`) keys the indices of MMEngine's ``DefaultSampler`` with its ``seed``
and ``epoch``; :class:`~xmr.datasets.language_batch_sampler.LanguageBatchSampler` keys its own.
A plain ``int`` index (``dataset[i]``, a sampler without a seed) keys nothing: the item draws
from the process's streams.
"""
from __future__ import annotations

import hashlib
import random
import struct
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch.utils.data import get_worker_info

__all__ = ['SampleIndex', 'sample_draws']


class SampleIndex(int):
    """A dataset index that carries the ``seed`` and ``epoch`` of the pass it was drawn for.

    An ``int`` to every dataset and array it indexes; it pickles with its key, so a DataLoader
    worker receives it whole.
    """

    seed: int
    epoch: int

    def __new__(cls, index: int, seed: int, epoch: int) -> SampleIndex:
        self = super().__new__(cls, index)
        self.seed, self.epoch = int(seed), int(epoch)
        return self

    def __getnewargs__(self) -> tuple[int, int, int]:  # type: ignore[override]
        return int(self), self.seed, self.epoch


@contextmanager
def sample_draws(index: int) -> Iterator[None]:
    """Seed this process's torch (CPU), NumPy and Python streams from ``index``'s sample key
    for the block.

    Every draw of the block, xmr's or a transform's of one's own, is then a function of the
    key. In a DataLoader worker the streams serve its items alone and each item seeds them
    anew; in the main process (a loader without workers) they are training's and get their
    states back after the block. The CUDA streams are left alone: no item is loaded on a GPU.

    Args:
        index: a :class:`SampleIndex`; a plain ``int`` leaves the streams as they are.
    """
    if not isinstance(index, SampleIndex):
        yield
        return
    # Saving and restoring NumPy's state costs more than the rest (~10x), so only where needed.
    saved = None if get_worker_info() is not None else (
        torch.get_rng_state(), np.random.get_state(), random.getstate())
    torch_seed, numpy_seed, python_seed = key_seeds(index)
    # Not torch.manual_seed, which also reseeds the GPU's stream of a process that uses one.
    torch.default_generator.manual_seed(torch_seed)
    np.random.seed(numpy_seed)
    random.seed(python_seed)
    try:
        yield
    finally:
        if saved is not None:
            torch.set_rng_state(saved[0])
            np.random.set_state(saved[1])
            random.setstate(saved[2])


def key_seeds(index: SampleIndex) -> tuple[int, int, int]:
    """The torch, NumPy and Python seeds of ``index``'s key ``(seed, epoch, index)``: 64, 32 and
    32 bits of its BLAKE2b digest, so that neighbouring indices or epochs seed unrelated
    streams (NumPy's legacy seed takes 32 bits)."""
    digest = hashlib.blake2b(struct.pack('<3q', index.seed, index.epoch, int(index)),
                             digest_size=16).digest()
    return (int.from_bytes(digest[:8], 'little'), int.from_bytes(digest[8:12], 'little'),
            int.from_bytes(digest[12:], 'little'))
