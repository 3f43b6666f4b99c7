"""Validation and test over several datasets in one pass, with one key to select models on.

DASD's Table 1 spans Multi30K (de, fr, cs) and MSCOCO (ja, and zh from COCO-CN); Table 2 is
Multi-MSRVTT video. MMEngine's ``ValLoop``/``TestLoop`` take one dataloader and one evaluator;
these loops take a list of each, evaluate the datasets one after the other (image and video
sets alike: the model embeds whatever media a batch holds), key every dataset's metrics by its
own prefix, and add the mean AR over the averaged languages of all datasets, so that
``CheckpointHook(save_best='mAR')`` selects on the whole validation table.

Config::

    val_dataloader = [multi30k_val_loader, coco_ja_val_loader]
    val_evaluator = [dict(type='RetrievalMetric', prefix='multi30k'),
                     dict(type='RetrievalMetric', protocol='coco_1k_5fold', prefix='coco_ja')]
    val_cfg = dict(type='MultiDatasetValLoop')

``ValLoop`` and ``TestLoop`` of xmr's scope are MMEngine's with these loops' data path: their
loader pins its batches on a GPU machine, its workers tokenise, and a batch whose every medium
a dataset skipped as unreadable goes to the metric without the model.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from mmengine.evaluator import Evaluator
from mmengine.runner import TestLoop as MMEngineTestLoop
from mmengine.runner import ValLoop as MMEngineValLoop
from mmengine.runner.amp import autocast
from mmengine.runner.base_loop import BaseLoop
from torch.utils.data import DataLoader

from xmr.datasets.collate import kept_no_item
from xmr.engine.frozen_casts import FrozenWeightCasts
from xmr.engine.pinned_batches import pinned_on_gpu
from xmr.engine.worker_signals import WORKER_IGNORED_SIGNALS, end_workers
from xmr.engine.worker_tokens import tokenize_in_workers
from xmr.evaluation.metrics import RetrievalMetric
from xmr.registry import LOOPS

__all__ = ['MultiDatasetValLoop', 'MultiDatasetTestLoop', 'LoaderSequence',
           'TestLoop', 'ValLoop', 'check_media_exist', 'combined_mean_ar',
           'expected_metric_keys', 'scored_loaders']


class LoaderSequence:
    """The loop's dataloaders, as ``runner.val_dataloader`` / ``runner.test_dataloader``.

    MMEngine's logger and timer hooks only ask that object for its length; here it is the total
    number of batches, matching the loop's running batch index, so progress logs and ETAs cover
    the whole evaluation.
    """

    def __init__(self, loaders: Sequence[DataLoader]) -> None:
        self.loaders = list(loaders)

    def __len__(self) -> int:
        return sum(len(loader) for loader in self.loaders)


def scored_loaders(loop: Any) -> list[tuple[DataLoader, Evaluator]]:
    """The dataloader and evaluator of each dataset a validation or test loop scores: the
    several of a ``MultiDataset*Loop``, the one of MMEngine's ``ValLoop`` / ``TestLoop``."""
    loaders = getattr(loop, 'dataloaders', None) or [loop.dataloader]
    evaluators = getattr(loop, 'evaluators', None) or [loop.evaluator]
    return list(zip(loaders, evaluators))


def expected_metric_keys(loop: Any) -> set[str] | None:
    """The keys a validation or test loop may report: its metrics'
    (:meth:`RetrievalMetric.expected_keys`) and a ``MultiDatasetValLoop``'s ``summary_key``.

    Returns:
        The keys, or ``None`` when a metric cannot tell (another metric type, languages not
        known before the evaluation).
    """
    keys: set[str] = set()
    summarised = False
    for _, evaluator in scored_loaders(loop):
        for metric in evaluator.metrics:
            expected = getattr(metric, 'expected_keys', None)
            found = expected() if expected is not None else None
            if found is None:
                return None
            keys |= found
            summarised = summarised or bool(_summarised_ar_keys(metric, found))
    summary_key = getattr(loop, 'summary_key', None)
    # As combined_mean_ar forms it: a t2i-only metric (text->video) reports no AR to average.
    if summary_key is not None and summarised:
        keys.add(summary_key)
    return keys


def _summarised_ar_keys(metric: Any, keys: Iterable[str]) -> list[str]:
    """The ``<prefix>/<lang>/AR`` among ``keys`` of the languages a :class:`RetrievalMetric`
    averages into its summaries (none for another metric)."""
    if not isinstance(metric, RetrievalMetric):
        return []
    head = f'{metric.prefix}/' if metric.prefix else ''
    evaluated = [key[len(head):-len('/AR')] for key in keys
                 if key.startswith(head) and key.endswith('/AR')
                 and key.count('/') == head.count('/') + 1]
    return [f'{head}{lang}/AR' for lang in metric.summary_languages(evaluated)] if evaluated \
        else []


def combined_mean_ar(evaluators: Sequence[Evaluator],
                     results: Sequence[Mapping[str, float]]) -> float | None:
    """Mean AR over the averaged languages of every dataset (DASD Table 1's mAR).

    Each language counts once, whatever dataset it comes from: with Multi30K de/fr/cs and COCO
    zh/ja the mean is over five ARs, not over two dataset means. A dataset counts through each of
    its :class:`RetrievalMetric` that reports per-language AR (both directions scored).

    Args:
        evaluators: one evaluator per dataset.
        results: the metric dict each evaluator returned (keys carry the metric prefix).

    Returns:
        The mean, or ``None`` when no dataset reports AR.
    """
    values = []
    for evaluator, metrics in zip(evaluators, results):
        for metric in evaluator.metrics:
            values.extend(metrics[key] for key in _summarised_ar_keys(metric, metrics))
    return sum(values) / len(values) if values else None


class _MultiDatasetLoop(BaseLoop):
    """Shared body of the validation and test loops; ``mode`` names the hooks it calls."""

    mode = ''

    def __init__(self, runner: Any, dataloader: Sequence[DataLoader | dict],
                 evaluator: Sequence[Evaluator | dict | list], fp16: bool = False,
                 summary_key: str | None = 'mAR') -> None:
        name = type(self).__name__
        if not isinstance(dataloader, Sequence) or isinstance(dataloader, (str, Mapping)):
            raise TypeError(f'{name} takes a list of dataloaders as {self.mode}_dataloader, got '
                            f'{type(dataloader).__name__}; use ValLoop/TestLoop for one dataset.')
        if not isinstance(evaluator, Sequence) or isinstance(evaluator, (str, Mapping)):
            raise TypeError(f'{name} takes a list of evaluators as {self.mode}_evaluator (one per '
                            f'dataloader), got {type(evaluator).__name__}.')
        if not dataloader:
            raise ValueError(f'{name}: {self.mode}_dataloader is an empty list.')
        if len(dataloader) != len(evaluator):
            raise ValueError(f'{name}: {len(dataloader)} dataloaders but {len(evaluator)} '
                             f'evaluators; {self.mode}_evaluator[i] scores '
                             f'{self.mode}_dataloader[i].')
        seed_per_rank = runner._randomness_cfg.get('diff_rank_seed', False)
        loaders = [runner.build_dataloader(pinned_on_gpu(loader), seed=runner.seed,
                                           diff_rank_seed=seed_per_rank)
                   if isinstance(loader, dict) else loader for loader in dataloader]
        super().__init__(runner, LoaderSequence(loaders))
        for loader in loaders:
            tokenize_in_workers(loader, runner.model)
        self.frozen_casts = FrozenWeightCasts()
        self.evaluators = [runner.build_evaluator(e) if isinstance(e, (dict, list)) else e
                           for e in evaluator]
        for loader, built in zip(loaders, self.evaluators):
            if hasattr(loader.dataset, 'metainfo'):
                built.dataset_meta = loader.dataset.metainfo
        self._check_prefixes()
        self.fp16 = fp16
        self.summary_key = summary_key

    @property
    def dataloaders(self) -> list[DataLoader]:
        return self.dataloader.loaders

    def _check_prefixes(self) -> None:
        owner: dict[str, int] = {}
        for index, evaluator in enumerate(self.evaluators):
            dataset = _dataset_name(self.dataloaders[index])
            for metric in evaluator.metrics:
                if not metric.prefix:
                    raise ValueError(
                        f'{self.mode}_evaluator[{index}] ({dataset}): {type(metric).__name__} '
                        "has no prefix; give each dataset's metric its own, e.g. "
                        f"prefix='{dataset}', so that its keys stay apart from the others'.")
                if owner.get(metric.prefix, index) != index:
                    raise ValueError(
                        f"{self.mode}_evaluator[{index}] ({dataset}) and "
                        f"{self.mode}_evaluator[{owner[metric.prefix]}] share the prefix "
                        f"'{metric.prefix}'; each dataset needs its own.")
                owner[metric.prefix] = index

    def run(self) -> dict[str, float]:
        """Evaluate every dataset in turn; return all their keys plus the combined summary."""
        self.runner.call_hook(f'before_{self.mode}')
        self.runner.call_hook(f'before_{self.mode}_epoch')
        self.runner.model.eval()
        metrics: dict[str, float] = {}
        results = []
        batch_idx = 0
        for loader, evaluator in zip(self.dataloaders, self.evaluators):
            for data_batch in loader:
                self.run_iter(batch_idx, data_batch, evaluator)
                batch_idx += 1
            # Each evaluator drops its stored embeddings here, so one gallery is held at a time.
            result = evaluator.evaluate(len(loader.dataset))
            results.append(result)
            metrics.update(result)
        if self.summary_key is not None:
            combined = combined_mean_ar(self.evaluators, results)
            if combined is not None:
                metrics[self.summary_key] = combined
        self.runner.call_hook(f'after_{self.mode}_epoch', metrics=metrics)
        self.runner.call_hook(f'after_{self.mode}')
        return metrics

    @torch.no_grad()
    def run_iter(self, batch_idx: int, data_batch: Any, evaluator: Evaluator) -> None:
        self.runner.call_hook(f'before_{self.mode}_iter', batch_idx=batch_idx,
                              data_batch=data_batch)
        casts = self.frozen_casts.swapped_into(self.runner.model) if self.fp16 else nullcontext()
        with autocast(enabled=self.fp16), casts:
            step = (self.runner.model.val_step if self.mode == 'val'
                    else self.runner.model.test_step)
            outputs = [] if kept_no_item(data_batch) else step(data_batch)
        evaluator.process(data_samples=outputs, data_batch=data_batch)
        self.runner.call_hook(f'after_{self.mode}_iter', batch_idx=batch_idx,
                              data_batch=data_batch, outputs=outputs)


@LOOPS.register_module()
class MultiDatasetValLoop(_MultiDatasetLoop):
    """Validation over several datasets, each scored by its own evaluator and prefix.

    The runner passes ``val_dataloader`` (a list) and ``val_evaluator`` (a list of the same
    length: one evaluator config, or a list of metric configs, per dataset). Every metric must
    have a prefix, distinct across datasets. The returned dict holds every dataset's keys and,
    under ``summary_key``, :func:`combined_mean_ar`: the key ``CheckpointHook(save_best=...)``
    selects on. Only validation hooks run (``after_val_epoch`` ...), so the checkpoint kept is
    chosen on validation data alone.

    Args:
        runner: the MMEngine runner.
        dataloader: dataloaders or their configs.
        evaluator: one evaluator (or its config) per dataloader.
        fp16: run the model under autocast.
        summary_key: key of the combined mean AR; ``None`` leaves it out.
    """

    mode = 'val'


@LOOPS.register_module()
class MultiDatasetTestLoop(_MultiDatasetLoop):
    """Test over several datasets; :class:`MultiDatasetValLoop` with the test hooks.

    Test hooks never touch the best-checkpoint record, so a test run cannot change which
    checkpoint validation selected. Every dataset's media are checked
    (:func:`check_media_exist`) before the first batch.
    """

    mode = 'test'

    def run(self) -> dict[str, float]:
        check_media_exist(loader.dataset for loader in self.dataloaders)
        with workers_ending(self.dataloaders):
            return super().run()


class _OneDatasetLoop:
    """MMEngine's one-dataset loop with the multi-dataset loops' data path: the loader pins its
    batches on a GPU machine (:func:`~xmr.engine.pinned_batches.pinned_on_gpu`) and its workers
    tokenise (:func:`~xmr.engine.worker_tokens.tokenize_in_workers`); MMEngine's loop does
    neither, and most shipped configs evaluate through it.

    A batch whose every medium was skipped as unreadable (``on_corrupt='skip'``) reaches the
    metric and the hooks without the model: there is nothing to embed, and MMEngine's loops
    fail on a step without outputs. The metric and ``CorruptMediaHook`` count its
    ``skipped_media``."""

    mode: str

    def __init__(self, runner: Any, dataloader: DataLoader | dict,
                 evaluator: Evaluator | dict | list, fp16: bool = False) -> None:
        super().__init__(runner, pinned_on_gpu(dataloader) if isinstance(dataloader, Mapping)
                         else dataloader, evaluator, fp16)
        tokenize_in_workers(self.dataloader, runner.model)

    @torch.no_grad()
    def run_iter(self, idx: int, data_batch: Any) -> None:
        if not kept_no_item(data_batch):
            super().run_iter(idx, data_batch)
            return
        self.runner.call_hook(f'before_{self.mode}_iter', batch_idx=idx, data_batch=data_batch)
        self.evaluator.process(data_samples=[], data_batch=data_batch)
        self.runner.call_hook(f'after_{self.mode}_iter', batch_idx=idx, data_batch=data_batch,
                              outputs=[])


@LOOPS.register_module()
class ValLoop(_OneDatasetLoop, MMEngineValLoop):
    """MMEngine's ``ValLoop`` with xmr's data path and skipped media (:class:`_OneDatasetLoop`)."""

    mode = 'val'


@LOOPS.register_module()
class TestLoop(_OneDatasetLoop, MMEngineTestLoop):
    """MMEngine's ``TestLoop`` with xmr's data path and skipped media (:class:`_OneDatasetLoop`);
    the dataset's media are checked (:func:`check_media_exist`) before the first batch.

    A test runs once: its loader's persistent workers end with it (as the test loops' of
    several datasets do), where they lived on until the process exited and were killed, each
    leaving its ``pymp-*`` folder in the temporary directory.
    """

    mode = 'test'

    def run(self) -> dict:
        check_media_exist([self.dataloader.dataset])
        with workers_ending([self.dataloader]):
            return super().run()


@contextmanager
def workers_ending(loaders: Sequence[DataLoader]) -> Iterator[None]:
    """A test's block: ``loaders``' workers ignore SIGTERM and SIGINT, and end with the block.

    A scheduler's SIGTERM (a terminal's Ctrl-C) reaches every process of the job: a worker it
    killed made torch's handler raise 'DataLoader worker is killed by signal' as the test,
    stopped by the same signal (``run_tool``), shut its loader down, a traceback under the
    tool's one line. The main process stops the test; the block's end ends the workers, whose
    shutdown they do not ignore.
    """
    from xmr.engine.hooks.preemption import workers_ignore

    for loader in loaders:
        workers_ignore(loader, WORKER_IGNORED_SIGNALS)
    try:
        yield
    finally:
        for loader in loaders:
            end_workers(loader)


def check_media_exist(datasets: Iterable[Any]) -> None:
    """Run each dataset's ``check_media_exist`` (missing files, damaged videos: one report per
    dataset, raised under ``on_corrupt='raise'``, warned under ``'skip'``) before a run reads
    any, each dataset once however many loaders share it."""
    for dataset in {id(dataset): dataset for dataset in datasets}.values():
        check = getattr(dataset, 'check_media_exist', None)
        if check is not None:
            check()


def _dataset_name(loader: DataLoader) -> str:
    metainfo = getattr(loader.dataset, 'metainfo', None) or {}
    return str(metainfo.get('dataset') or type(loader.dataset).__name__)
