"""Resuming a phase in its middle: skip its data at the sampler, each item keyed with its pass
(its random draws those of an uninterrupted run), the samplers seeded with the checkpoint's
seed, and keep the ETA honest; loaders whose passes have no known end are refused."""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Sized
from typing import Any

from mmengine.dataset import InfiniteSampler
from mmengine.hooks import IterTimerHook
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, Sampler

from xmr.datasets.sample_keys import SampleIndex


class PassIndices(Sampler):
    """The sampler of a DataLoader batched by torch's :class:`~torch.utils.data.BatchSampler`,
    each index keyed with its pass, the next pass starting after its first ``skip`` indices.

    Keyed: each index is a :class:`~xmr.datasets.sample_keys.SampleIndex` carrying the wrapped
    sampler's ``seed`` and ``epoch`` (MMEngine's ``DefaultSampler``: the run's seed and the
    pass the loop set), so an item's random draws do not depend on the worker that loads it
    (a sampler without a seed passes plain indices).

    Skipped (a resumed run): the DataLoader never asks the dataset for the skipped items, so
    nothing is read, decoded or collated. The indices are still drawn from the wrapped sampler
    (cheap integers), which keeps the order of what follows exactly that of the uninterrupted
    pass. Later passes are whole.

    Args:
        sampler: the wrapped sampler (e.g. MMEngine's ``DefaultSampler``).
    """

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self.skip = 0

    def __iter__(self) -> Iterator[int]:
        skip, self.skip = self.skip, 0
        indices = itertools.islice(iter(self.sampler), skip, None)
        seed = getattr(self.sampler, 'seed', None)
        if seed is None:
            return indices
        epoch = getattr(self.sampler, 'epoch', 0)
        return (SampleIndex(index, seed, epoch) for index in indices)

    def __len__(self) -> int:
        # One whole pass: BatchSampler's length (len(dataloader)) must not change mid-run.
        return len(self.sampler) if isinstance(self.sampler, Sized) else 0


def pass_indices(dataloader: DataLoader) -> PassIndices | None:
    """The :class:`PassIndices` of a map-style DataLoader batched by torch's ``BatchSampler``,
    put in place of its sampler on the first call; ``None`` for another batch sampler, which
    plans (and keys) its passes itself, or an iterable dataset, which ignores indices."""
    batch_sampler = dataloader.batch_sampler
    if type(batch_sampler) is not BatchSampler or isinstance(dataloader.dataset,
                                                             IterableDataset):
        return None
    if not isinstance(batch_sampler.sampler, PassIndices):
        batch_sampler.sampler = PassIndices(batch_sampler.sampler)
    return batch_sampler.sampler


def refuse_endless_sampler(dataloader: Any, where: str) -> None:
    """Refuse a DataLoader whose passes have no known end: one sampled by MMEngine's
    ``InfiniteSampler`` (the sampler of MMEngine's iteration-based configs), or by a sampler
    or batch sampler without ``len``.

    The phased loop counts its own iterations and reads its loaders pass by pass: each pass
    sets the sampler's epoch, a resumed phase skips whole passes (``len(dataloader)`` batches
    each) and each phase starts its own passes. ``InfiniteSampler`` draws every pass from one
    generator, made when it is built: a phase's end closes it, so the next phase reading the
    loader stops at once (a bare ``StopIteration``), and a run resumed past the first
    ``len(dataloader)`` batches reads other items than the uninterrupted one. An iterable
    dataset ends its passes itself, and a loader of one's own (no DataLoader) is taken as it is.

    Args:
        dataloader: the built loader a phase reads.
        where: the loader as the error names it, e.g. ``'phase cross_lingual: its dataloader
            (train_dataloader)'``.

    Raises:
        ValueError: naming ``where``, the sampler's type and the sampler to use instead.
    """
    if not isinstance(dataloader, DataLoader) or isinstance(dataloader.dataset,
                                                            IterableDataset):
        return
    batch_sampler = dataloader.batch_sampler
    if batch_sampler is None:
        sampler = dataloader.sampler
    elif type(batch_sampler) is BatchSampler:
        sampler = batch_sampler.sampler
    else:
        sampler = batch_sampler  # it plans its passes itself
    if isinstance(sampler, InfiniteSampler):
        fault = 'never ends a pass'
    elif not isinstance(sampler, Sized):
        fault = 'tells no length of a pass (no __len__)'
    else:
        return
    raise ValueError(f'{where} samples with {type(sampler).__name__}, which {fault}; '
                     'PhasedTrainLoop counts its own iterations and reads its loaders pass by '
                     "pass: use sampler=dict(type='DefaultSampler', shuffle=True)")


def reseed_samplers(dataloader: Any, built_with: int, seed: int) -> None:
    """Give the samplers of ``dataloader`` that took the run's seed when it was built,
    ``built_with``, the seed the run trains with, ``seed``.

    The seed decides each pass's order and keys every item's draws
    (:class:`PassIndices`, :class:`~xmr.datasets.language_batch_sampler.LanguageBatchSampler`
    copies its sampler's). A sampler seeded otherwise (a ``seed`` of its own config) keeps its
    seed, as it did in the run that wrote the checkpoint.
    """
    batch_sampler = getattr(dataloader, 'batch_sampler', None)
    samplers = (getattr(dataloader, 'sampler', None), batch_sampler,
                getattr(batch_sampler, 'sampler', None))
    for sampler in samplers:
        if getattr(sampler, 'seed', None) == built_with:
            sampler.seed = seed


def can_skip_at_sampler(dataloader: DataLoader) -> bool:
    """Whether :func:`skip_at_sampler` applies: a map-style DataLoader batched by torch, or by
    a batch sampler that can start a pass at a given batch (``start_at(batches)``, e.g.
    :class:`~xmr.datasets.language_batch_sampler.LanguageBatchSampler`).

    An iterable dataset ignores the sampler's indices, so dropping them would skip nothing.
    """
    batch_sampler = dataloader.batch_sampler
    return ((type(batch_sampler) is BatchSampler or hasattr(batch_sampler, 'start_at'))
            and not isinstance(dataloader.dataset, IterableDataset))


def skip_at_sampler(dataloader: DataLoader, batches: int) -> None:
    """Make the DataLoader's next pass start at batch ``batches`` without loading the skipped ones.

    Only for :func:`can_skip_at_sampler` loaders: torch's ``BatchSampler`` cuts consecutive
    runs of ``batch_size`` indices, so the first ``batches`` batches are exactly the first
    ``batches x batch_size`` indices of the pass (a custom batch sampler may group differently,
    and says where to start itself: ``start_at``).
    """
    batch_sampler = dataloader.batch_sampler
    if hasattr(batch_sampler, 'start_at'):
        batch_sampler.start_at(batches)
        return
    pass_indices(dataloader).skip = batches * batch_sampler.batch_size


def restart_iteration_timers(runner) -> None:
    """Start the clock of MMEngine's iteration timer now.

    ``IterTimerHook`` times an iteration from the end of the previous one (or the start of the
    epoch) and derives the ETA from the mean; entering a phase (building its data and caches,
    skipping to a resumed iteration) is no iteration and would inflate the first time and
    every ETA after it.
    """
    for hook in runner.hooks:
        if isinstance(hook, IterTimerHook):
            hook.before_train_epoch(runner)
