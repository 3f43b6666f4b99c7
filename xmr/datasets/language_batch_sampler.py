"""Batches of one language each, as the DASD and MLA authors batch their training data."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from mmengine.dist import get_dist_info
from torch.utils.data import Sampler

from xmr.datasets.sample_keys import SampleIndex
from xmr.registry import DATA_SAMPLERS

__all__ = ['GlobalBatchSampler', 'LanguageBatchSampler']


@DATA_SAMPLERS.register_module()
class LanguageBatchSampler(Sampler[list[int]]):
    """Cuts each pass into full batches that each hold one language's items.

    The authors of DASD and MLA train from one loader per language (their ``MetaLoader`` draws
    the language of each batch), so no batch mixes languages. Mixed batches differ in what the
    losses see: an image paired with captions in two languages of one batch is its own negative
    in the contrastive ``L_CM`` (17% of Multi30K's batches at 128 with de, fr and cs), and the
    SDM's adversarial negatives come from other languages.

    A pass is planned from the pass's permutation of the dataset (``torch.randperm`` seeded with
    ``seed + epoch``, MMEngine's ``DefaultSampler``'s; the identity without ``shuffle``): each
    language's items in that order are cut into batches of ``batch_size``, a language's last
    incomplete batch is dropped, and the batches follow one another in the order in which
    they complete along the permutation. Every language thus appears in proportion to its items
    (the authors draw each batch's language uniformly; the two agree for languages of equal
    size, as in Multi30K and the translated CC300K; a language too small for one batch is
    refused, as it would never train), and with one language the batches are
    those of ``DefaultSampler`` with ``drop_last``. Under DDP the plan is of global batches
    (``world_size x batch_size`` items of one language) and each rank reads its slice of every
    one, in rank order: the contrastive losses gather the global batch
    (``gather_with_grad``), which thus holds one language as a single process's batch does
    (batches of different languages dealt to the ranks would put an image with its captions in
    two languages in one gathered batch, its own negative), and a DDP step reads exactly the
    batch one process with the global batch size reads. The plan depends only on the seed and
    the epoch, so a resumed run starts a pass at any batch without reading the ones before
    (:meth:`start_at`).

    MMEngine builds it from a dataloader's ``batch_sampler=dict(type='LanguageBatchSampler')``
    with the dataloader's ``sampler`` (its ``dataset``, ``seed`` and ``shuffle`` are read) and
    ``batch_size``; such a dataloader sets no ``drop_last`` (torch refuses it beside a batch
    sampler; incomplete batches are always dropped).

    Args:
        sampler: the dataloader's built sampler; its ``dataset`` gives each item's language
            through ``item_languages()`` (``[N]`` ints, equal for one language's items).
        batch_size: items per batch, per process.
    """

    def __init__(self, sampler: Sampler, batch_size: int) -> None:
        dataset = getattr(sampler, 'dataset', None)
        name = type(self).__name__
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f'{name}: batch_size must be a positive int, got {batch_size!r}')
        self.sampler = sampler  # MMEngine's DistSamplerSeedHook looks for it
        self.languages = self.item_groups(dataset)
        self.batch_size = batch_size
        self.seed = int(getattr(sampler, 'seed', 0) or 0)
        self.shuffle = bool(getattr(sampler, 'shuffle', True))
        self.rank, self.world_size = get_dist_info()
        self._epoch = 0
        self._start = 0
        codes, counts = np.unique(self.languages, return_counts=True)
        global_batch = batch_size * self.world_size
        short = counts < global_batch
        if short.any():
            # Such a language would never make a batch, so never train: say so before a run.
            names = getattr(dataset, 'target_langs', None) or getattr(dataset, 'languages', None)
            listed = ', '.join(
                f'{self.group_name(code, names)} ({count} item{"" if count == 1 else "s"})'
                for code, count in zip(codes[short], counts[short]))
            raise ValueError(
                f'{name}: {listed} fill no batch of {global_batch} (batch_size '
                f'{batch_size} x world size {self.world_size}), so they would never train; '
                f'{self.too_small_advice}')
        self._batches_per_rank = int((counts // global_batch).sum())

    #: What to do about a group too small for one global batch.
    too_small_advice = ('lower batch_size, add their captions, leave them out of the target '
                        "languages, or mix languages in batches with batch_sampler=dict("
                        "type='GlobalBatchSampler')")

    @staticmethod
    def item_groups(dataset: Any) -> np.ndarray:
        """``[N]`` each item's language, from the dataset's ``item_languages()``: a batch holds
        one group."""
        item_languages = getattr(dataset, 'item_languages', None)
        if item_languages is None:
            raise ValueError(
                f'LanguageBatchSampler: {type(dataset).__name__} tells no item languages (it has '
                "no item_languages()); train it with batch_sampler=dict(type='GlobalBatchSampler'"
                '), or wrap a dataset that has them (CaptionPairDataset, SyntheticPairDataset, '
                'CachedFeatureDataset)')
        return np.asarray(item_languages())

    @staticmethod
    def group_name(code: int, names: Sequence[str] | None) -> str:
        """A group of :meth:`item_groups` as the dataset names its language."""
        return _language_name(code, names)

    @property
    def epoch(self) -> int:
        """The pass planned: the wrapped sampler's ``epoch`` where it keeps one and
        :meth:`set_epoch` sets it (``set_epoch``), else the last :meth:`set_epoch`'s.

        MMEngine's loops set the epoch of ``batch_sampler.sampler`` alone (``DistSamplerSeedHook``
        each epoch, ``IterBasedTrainLoop`` each pass): read from here only, every pass they
        begin was pass 0 again, in the same order.
        """
        if hasattr(self.sampler, 'set_epoch') and hasattr(self.sampler, 'epoch'):
            return int(self.sampler.epoch)
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Plan the next pass as pass ``epoch`` (the training loop calls it before each)."""
        self._epoch = epoch
        if hasattr(self.sampler, 'set_epoch'):
            self.sampler.set_epoch(epoch)

    def start_at(self, batches: int) -> None:
        """Make the next pass begin at its batch ``batches`` (a resumed run); later passes are
        whole."""
        self._start = batches

    def plan(self) -> np.ndarray:
        """This rank's batches of pass :attr:`epoch`, in order: ``[len(self), batch_size]``
        int64 dataset indices (8 bytes an item, where lists of Python ints took about 40: a
        pass of CC3M in five translations held 0.7 GB per rank)."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.languages), generator=generator).numpy()
        else:
            order = np.arange(len(self.languages))
        languages = self.languages[order]
        size = self.batch_size * self.world_size  # the global batch: one language
        completed_at, batches = [], []
        for language in np.unique(languages):
            positions = np.flatnonzero(languages == language)
            members = positions[:len(positions) // size * size].reshape(-1, size)
            completed_at.append(members[:, -1])
            # This rank's slice of each global batch, in rank order (gather_with_grad's).
            batches.append(order[members[:, self.rank * self.batch_size:
                                         (self.rank + 1) * self.batch_size]])
        return np.concatenate(batches)[np.argsort(np.concatenate(completed_at), kind='stable')]

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's batches of the pass from its start (:meth:`start_at`), each index a
        :class:`~xmr.datasets.sample_keys.SampleIndex` keyed with the seed and the epoch."""
        # A generator: the start is taken at the first batch drawn, not when iter() is called.
        # A DataLoader with workers calls iter() twice and draws from the second iterator only.
        start, self._start = self._start, 0
        for batch in self.plan()[start:]:
            yield [SampleIndex(index, self.seed, self.epoch) for index in batch.tolist()]

    def __len__(self) -> int:
        return self._batches_per_rank


@DATA_SAMPLERS.register_module()
class GlobalBatchSampler(LanguageBatchSampler):
    """Full batches of the pass's permutation, languages mixed, read under DDP as
    :class:`LanguageBatchSampler` reads them: each rank its slice of every global batch, and the
    incomplete last one dropped, so a DDP step reads exactly the batch one process with the
    global batch size reads (MMEngine's ``DefaultSampler`` with ``drop_last``).

    ``batch_sampler=None`` beside MMEngine's ``DefaultSampler`` shards the pass rank by rank and
    pads it to a multiple of the world size with the pass's first items: under DDP those items
    are trained twice a pass wherever the padding reaches a batch (always without
    ``drop_last``), and the steps are not those of one process.

    Args:
        sampler: the dataloader's built sampler (its ``dataset``, ``seed`` and ``shuffle``).
        batch_size: items per batch, per process.
    """

    too_small_advice = 'lower batch_size or add items'

    @staticmethod
    def item_groups(dataset: Any) -> np.ndarray:
        """``[N]`` zeros: every item in one group, whatever its language."""
        return np.zeros(len(dataset), dtype=np.int64)

    @staticmethod
    def group_name(code: int, names: Sequence[str] | None) -> str:
        return 'the dataset'


def _language_name(code: int, names: Sequence[str] | None) -> str:
    """An ``item_languages()`` code as the dataset names it: the language at that position of
    its languages where it lists them (``CaptionPairDataset``'s ``-1`` marks source captions)."""
    if code < 0:
        return 'the source captions'
    if names is not None and code < len(names):
        return f'language {names[code]!r}'
    return f'language #{code}'
