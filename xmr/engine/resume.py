"""Resuming a phase in its middle: skip its data at the sampler and keep the ETA honest."""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Sized

from mmengine.hooks import IterTimerHook
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, Sampler


class SkipFirstIndices(Sampler):
    """A sampler whose next pass starts after its first ``count`` indices; later passes are whole.

    It wraps the sampler of a DataLoader's :class:`~torch.utils.data.BatchSampler`, so the
    DataLoader never asks the dataset for the skipped items: nothing is read, decoded or
    collated. The indices are still drawn from the wrapped sampler (cheap integers), which keeps
    the order of what follows exactly that of the uninterrupted pass.

    Args:
        sampler: the wrapped sampler (e.g. MMEngine's ``DefaultSampler``).
        count: indices to drop from the start of the next pass.
    """

    def __init__(self, sampler: Sampler, count: int) -> None:
        self.sampler = sampler
        self.count = count

    def __iter__(self) -> Iterator[int]:
        count, self.count = self.count, 0
        return itertools.islice(iter(self.sampler), count, None)

    def __len__(self) -> int:
        # One whole pass: BatchSampler's length (len(dataloader)) must not change mid-run.
        return len(self.sampler) if isinstance(self.sampler, Sized) else 0


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
    count = batches * batch_sampler.batch_size
    if isinstance(batch_sampler.sampler, SkipFirstIndices):
        batch_sampler.sampler.count = count
    else:
        batch_sampler.sampler = SkipFirstIndices(batch_sampler.sampler, count)


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
