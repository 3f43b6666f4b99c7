"""Dataset-level column statistics for CDDS's correlation (paper Table 5, "once over the dataset").

A :class:`~xmr.models.disentanglers.cdds.CDDSColumnCorrelation` in mode ``'dataset'`` reads
its column Gaussians from sufficient statistics accumulated over the training set rather than
from the current batch. This hook fills them: it empties every such estimate of the model
(:meth:`~xmr.models.retrievers.dual_encoder.DualEncoderRetriever.dataset_correlations`),
runs the training data through the towers (and the UNets) in eval mode without gradient, sums
the statistics over the ranks, and hands the model back in train mode. Each rank reads its shard
of the dataset without the sampler's pad and drops no batch, so the sum over the ranks counts
every item once, as one process does.

When: before the first iteration (unless a resumed checkpoint already holds an estimate), then
every ``interval`` iterations — by default once per pass over the training data (the train
loop's dataloader, even beside a dataloader of the hook's own), so the estimate follows
the semantic components as they train, at the cost of one extra forward pass per epoch.
Validation-like passes leave every random stream untouched, so a run with the hook trains on
the same batches as one without.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch
from mmengine import dist
from mmengine.hooks import Hook
from torch.utils.data import BatchSampler, DataLoader, Sampler

from xmr.engine.distributed import shared_seed, unpadded_shard_size
from xmr.engine.hooks.preemption import preemption_signals, workers_ignore
from xmr.engine.pinned_batches import pinned_on_gpu
from xmr.engine.resume import PassIndices
from xmr.engine.rng import preserved_rng_state
from xmr.engine.wrappers import unwrap_model
from xmr.models.retrievers.dual_encoder import DualEncoderRetriever
from xmr.registry import HOOKS


@HOOKS.register_module()
class CDDSCorrelationHook(Hook):
    """Recomputes CDDS's dataset-level correlation statistics at the start and periodically.

    Args:
        interval: iterations between two recomputations; ``None`` = the batches of a pass
            of the train loop's dataloader (once per epoch of training, at the same iterations
            on every rank, whatever the hook's own dataloader); ``0`` = only once, before
            training.
        max_batches: read at most this many batches per recomputation, on each rank (a
            random subset of the dataset when the loader shuffles); ``None`` = all of them.
        dataloader: dataloader config to read; ``None`` = the train loop's dataloader.
    """

    priority = 'ABOVE_NORMAL'

    def __init__(self, interval: int | None = None, max_batches: int | None = None,
                 dataloader: dict | None = None) -> None:
        if interval is not None and interval < 0:
            raise ValueError(f'interval must be non-negative or None, got {interval}')
        if max_batches is not None and max_batches < 1:
            raise ValueError(f'max_batches must be positive or None, got {max_batches}')
        self.interval, self.max_batches = interval, max_batches
        self.dataloader_cfg = dataloader
        self._dataloader: Any = None

    @staticmethod
    def _model(runner) -> torch.nn.Module:
        model = runner.model
        return unwrap_model(model)

    def _loader(self, runner) -> Any:
        if self._dataloader is None:
            self._dataloader = _each_item_once(
                runner.train_loop.dataloader if self.dataloader_cfg is None
                else runner.build_dataloader(pinned_on_gpu(self.dataloader_cfg),
                                             seed=shared_seed(runner)))
            # A preemption's signal reaches every process of the job: a refresh's workers must
            # outlive it, as training's do, for the iteration and its checkpoint to finish.
            workers_ignore(self._dataloader, preemption_signals(runner))
        return self._dataloader

    def _correlations(self, runner) -> list[torch.nn.Module]:
        model = self._model(runner)
        if not isinstance(model, DualEncoderRetriever):
            raise TypeError(f'CDDSCorrelationHook needs a model with dataset_correlations() '
                            f'(DualEncoderRetriever); got {type(model).__name__}')
        correlations = model.dataset_correlations()
        if not correlations:
            raise ValueError("CDDSCorrelationHook: the model has no correlation in mode "
                             "'dataset'; set correlation=dict(mode='dataset') or drop the hook")
        return correlations

    def refresh(self, runner) -> None:
        """Empty the estimates and accumulate them over the dataloader (all ranks summed)."""
        model = self._model(runner)
        correlations = self._correlations(runner)
        for correlation in correlations:
            correlation.reset()
        was_training = model.training
        model.eval()
        with preserved_rng_state(), torch.no_grad():
            for index, batch in enumerate(self._loader(runner)):
                if self.max_batches is not None and index >= self.max_batches:
                    break
                model.accumulate_correlation(**model.data_preprocessor(batch, False))
        model.train(was_training)
        for correlation in correlations:
            # Summed sufficient statistics of all shards are those of the whole dataset.
            dist.all_reduce(correlation.image_statistics, op='sum')
            dist.all_reduce(correlation.text_statistics, op='sum')
        images, words = correlations[0].num_accumulated_tokens
        runner.logger.info(f'CDDS correlation statistics recomputed at iteration {runner.iter} '
                           f'from {images:,} image and {words:,} text tokens')

    def before_train(self, runner) -> None:
        correlations = self._correlations(runner)
        resumed_estimate = runner.iter > 0 and all(
            min(c.num_accumulated_tokens) > 0 for c in correlations)
        if not resumed_estimate:
            self.refresh(runner)

    def before_train_iter(self, runner, batch_idx: int, data_batch: Any = None) -> None:
        # A training pass has as many batches on every rank; the hook's shards need not (no pad).
        interval = (len(runner.train_loop.dataloader) if self.interval is None
                    else self.interval)
        if interval and runner.iter > 0 and runner.iter % interval == 0:
            self.refresh(runner)


class _Unpadded(Sampler[int]):
    """The indices of ``sampler``'s shard of a pass without its trailing pad
    (:func:`~xmr.engine.distributed.unpadded_shard_size`)."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(iter(self.sampler), len(self))

    def __len__(self) -> int:
        return unpadded_shard_size(self.sampler)


def _each_item_once(loader: DataLoader) -> DataLoader:
    """``loader``'s dataset, collation and batch size, reading this rank's shard of a pass
    through the per-item sampler beneath its batch sampler, without the pad, and no batch
    dropped: summed over the ranks, every item of the dataset once, as one process reads it.

    MMEngine's ``DefaultSampler`` pads a pass to a multiple of the ranks with its first items,
    which a sum of the ranks' statistics would count twice. xmr's batch samplers
    (``LanguageBatchSampler``) drop each language's incomplete global batch; the per-item
    sampler under them is the ``DefaultSampler`` MMEngine built for the dataloader. Its plain
    indices leave the batch sampler's state alone: a resumed pass's start (``PassIndices.skip``,
    ``start_at``) stays for training. Workers are this pass's own: a loader with persistent
    workers hands every ``iter()`` its one iterator, restarted, so a pass over the train loop's
    loader would restart the pass training is in, which would then skip the batches read here.
    """
    sampler = loader.batch_sampler.sampler
    if isinstance(sampler, PassIndices):
        sampler = sampler.sampler
    batches = BatchSampler(_Unpadded(sampler), loader.batch_sampler.batch_size, drop_last=False)
    # No generator: the workers' seeds then come from torch's stream, which refresh()
    # restores, and the train loader's own generator is not drawn from.
    return DataLoader(loader.dataset, batch_sampler=batches, num_workers=loader.num_workers,
                      collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
                      timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
                      multiprocessing_context=loader.multiprocessing_context,
                      prefetch_factor=loader.prefetch_factor)
