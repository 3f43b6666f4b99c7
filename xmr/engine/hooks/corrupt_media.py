"""Counting the media that datasets skipped as unreadable, reported per epoch and per run.

Datasets with ``on_corrupt='skip'`` replace an unreadable file's item by a marker; the collate
function drops it and lists the path under ``batch['skipped_media']``. This hook sums those lists
and, after every train epoch, validation run and test run, logs how many files were skipped and
which, so a skipped file never goes unnoticed even when the per-item warnings scrolled away.
Iteration-based training (xmr's phases) runs a single long "epoch", so the train count is also
reported every ``interval`` iterations. A batch counts as it enters its step, so a step whose
loss is non-finite (it reaches no ``after_train_iter``) counts too; a run that fails names what
it skipped since the last report (this rank's). Under DDP each report sums the files of every
rank (the main process alone writes the log file, and each rank reads its own shard); a
validation or test names each file once, as its metric counts it, though the sampler's padding
read it twice.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from mmengine.dist import all_gather_object, is_distributed
from mmengine.hooks import Hook

from xmr.models.losses.distributed import host_group
from xmr.registry import HOOKS
from xmr.utils.listing import counted, first_few

__all__ = ['CorruptMediaHook']


@HOOKS.register_module()
class CorruptMediaHook(Hook):
    """Report the media skipped by ``on_corrupt='skip'``.

    Args:
        interval: also report the train count every ``interval`` iterations (0: only at the
            end of each train epoch).
        max_names: file names listed in one report (the count is always complete).
    """

    priority = 'LOW'

    def __init__(self, interval: int = 1000, max_names: int = 20) -> None:
        if interval < 0 or max_names < 0:
            raise ValueError(f'interval and max_names must be >= 0, got {interval}, {max_names}')
        self.interval = interval
        self.max_names = max_names
        self._skipped: dict[str, Counter[str]] = {'train': Counter(), 'val': Counter(),
                                                  'test': Counter()}

    def _collect(self, mode: str, data_batch: Any) -> None:
        if isinstance(data_batch, dict):
            self._skipped[mode].update(data_batch.get('skipped_media', ()))

    def _report(self, runner: Any, mode: str, scope: str) -> None:
        # Every rank reports at the same points (epoch ends, iteration intervals): the counts of
        # all shards, which the main process logs. Host objects, exchanged through the host's
        # gloo group: under NCCL they would be copied to the device and the step would wait.
        group = host_group() if is_distributed() else None
        skipped = sum(map(Counter, all_gather_object(dict(self._skipped[mode]), group=group)),
                      Counter())
        self._skipped[mode].clear()
        if mode != 'train':
            # An evaluation leaves a file out once, as its metric counts it, though a
            # distributed sampler pads the last shards with repeats of the first items.
            skipped = Counter(set(skipped))
        self._log(runner, skipped, scope)

    def _log(self, runner: Any, skipped: Counter[str], scope: str) -> None:
        total = sum(skipped.values())
        if total:
            names = sorted(skipped)
            listed = first_few((f'{name} (x{skipped[name]})' if skipped[name] > 1 else name
                                for name in names), self.max_names)
            runner.logger.warning(f'{scope}: {total} unreadable media skipped '
                                  f'({counted(len(names), "file")}): {listed}')

    def before_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None:
        # Counted before the step: an iteration whose loss is non-finite (a tolerated one, or
        # the one that stops the run) reaches no after_train_iter, yet its files were skipped.
        self._collect('train', data_batch)

    def after_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None,
                         outputs: Any = None) -> None:
        if self.interval and (runner.iter + 1) % self.interval == 0:
            self._report(runner, 'train', f'train up to iteration {runner.iter + 1}')

    def after_val_iter(self, runner: Any, batch_idx: int, data_batch: Any = None,
                       outputs: Any = None) -> None:
        self._collect('val', data_batch)

    def after_test_iter(self, runner: Any, batch_idx: int, data_batch: Any = None,
                        outputs: Any = None) -> None:
        self._collect('test', data_batch)

    def after_train_epoch(self, runner: Any) -> None:
        self._report(runner, 'train', f'train epoch {runner.epoch + 1}')

    def after_failed_train(self, runner: Any) -> None:
        """Name the files skipped since the last report of a run that fails (a diverged loss,
        an error), which reaches no epoch end: this rank's alone, since another rank may have
        failed and would never join a gather.

        A run with nothing to name reads nothing of the runner: one whose train loop failed to
        be built has none, and ``runner.iter`` built it again, its error logged a second time
        as this hook's."""
        skipped, self._skipped['train'] = self._skipped['train'], Counter()
        if not skipped:  # a batch counted means the loop was built, and runner.iter is its
            return
        self._log(runner, skipped, f'train up to the failure at iteration {runner.iter + 1}, '
                                   'this rank')

    def after_val_epoch(self, runner: Any, metrics: dict[str, float] | None = None) -> None:
        self._report(runner, 'val', 'validation')

    def after_test_epoch(self, runner: Any, metrics: dict[str, float] | None = None) -> None:
        self._report(runner, 'test', 'test')
