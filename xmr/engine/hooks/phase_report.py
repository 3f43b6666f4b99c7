"""A per-language table of retrieval before and after each phase, printed when training ends."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from mmengine.dist import is_main_process
from mmengine.hooks import Hook
from mmengine.logging import print_log

from xmr.engine.wrappers import unwrap_model
from xmr.evaluation.evaluated_sets import evaluated_sets
from xmr.evaluation.leaderboard import (
    caption_token_lines,
    format_table,
    leaderboard_columns,
    plain_metrics,
)
from xmr.fileio import atomic_write_text
from xmr.json_files import JSONFileError, load_json
from xmr.registry import HOOKS
from xmr.utils.cli import did_you_mean

__all__ = ['PhaseReportHook', 'format_table', 'warn_if_unreported']


@HOOKS.register_module()
class PhaseReportHook(Hook):
    """Records every validation with the phase it belongs to and prints an AR table at the end.

    Columns are the validations in order (``<phase> start`` / ``<phase> end``); rows are the
    languages (the source language is the frozen teacher) and the mean over target languages.
    The table is written to ``<work_dir>/phase_report.{md,json}`` after every validation
    (atomically) by the main process alone (every rank has the metrics). Each checkpoint
    carries the columns validated before it, and a resumed run takes them back, so the report
    of an interrupted and resumed run is that of an uninterrupted one, also in another work
    dir (a fork); a checkpoint of an earlier xmr without them resumes the columns of its work
    dir's JSON.

    Below the table, the languages whose validation captions the model reads cut (longer than
    its text context) or as unknown tokens are named, as ``tools/test.py`` names them below its
    leaderboard: a language's low recall may be its captions' loss, not the method's. They are
    counted as training begins.

    Args:
        metric: per-language metric key suffix (``'{lang}/<metric>'``); ``None``: ``AR``, or
            where the validation reports none, the statistic the leaderboard tabulates its
            metrics by (``t2i_R@1`` for ``text_to_video``, whose summary is ``t2v_R@1_sum``).
        mean_key: key of the mean over target languages; ``None``: ``mAR``, or the summary
            that goes with ``metric``'s choice.
    """

    priority = 'LOW'

    def __init__(self, metric: str | None = None, mean_key: str | None = None) -> None:
        self.given = (metric, mean_key)
        #: ``(label, iteration, metrics)`` per validation, in order.
        self.columns: list[tuple[str, int, dict[str, float]]] = []
        #: The validation's datasets with their ``caption_token_counts`` (:func:`evaluated_sets`),
        #: counted by the main process as training begins.
        self.validation_sets: list[dict] = []

    def before_train(self, runner) -> None:
        if runner.val_loop is not None and is_main_process():
            self.validation_sets = evaluated_sets(runner.val_loop, unwrap_model(runner.model),
                                                  'validation')

    def after_val_epoch(self, runner, metrics: dict | None = None) -> None:
        if not metrics:
            return
        loop = runner.train_loop if runner._train_loop is not None else None
        phase = getattr(loop, 'current_phase', None)
        if phase is None:
            label = 'eval'
        else:
            label = f'{phase.name} {"start" if runner.iter == phase.start else "end"}'
            if phase.start < runner.iter < phase.end:
                label = f'{phase.name} @{runner.iter}'
        if not self.columns and self.given[0] is not None:
            warn_if_unreported(self.given[0], metrics)
        # A resumed run validates a phase's start again: its column replaces the restored one.
        self.columns = [column for column in self.columns if column[0] != label]
        self.columns.append((label, runner.iter, plain_metrics(metrics)))
        self._write(Path(runner.work_dir))

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint['phase_report'] = self._records()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if not runner._resume:
            return
        records = checkpoint.get('phase_report')
        if records is None:  # a checkpoint of an earlier xmr: its work dir's report
            saved = Path(runner.work_dir) / 'phase_report.json'
            if not saved.is_file():
                return
            records = _saved_records(saved)
        resumed_at = (checkpoint.get('meta') or {}).get('iter')
        if resumed_at is None:
            # A file of weights alone: CheckpointHook refuses it, naming what it lacks.
            return
        self.columns = [(c['column'], c['iter'], c['metrics']) for c in records
                        if c['iter'] <= resumed_at]

    @property
    def metric(self) -> str:
        return self._statistic()[0]

    @property
    def mean_key(self) -> str:
        return self._statistic()[1]

    def _statistic(self) -> tuple[str, str]:
        """``(metric, mean_key)``: those given, else ``AR`` and ``mAR``, else the leaderboard's
        headline of the first validation (read from the columns: a resumed run has them)."""
        metric, mean_key = self.given
        first = self.columns[0][2] if self.columns else {}
        if metric is None and not any(key.endswith('/AR') for key in first):
            headline = next((column.headline for column in leaderboard_columns(first)), None)
            if headline is not None:
                return headline.per_language, mean_key or headline.summary
        return metric or 'AR', mean_key or 'mAR'

    def report(self) -> str:
        """:meth:`table` and below it, a line each, the languages whose validation captions
        are read cut or as unknown tokens (:func:`caption_token_lines`)."""
        legend = '\n'.join(f'- {line}' for line in caption_token_lines('validation',
                                                                       self.validation_sets))
        return f'{self.table()}\n\n{legend}' if legend else self.table()

    def table(self) -> str:
        header = ['language', *(label for label, _, _ in self.columns)]
        rows = [[label, *(f'{m[key]:.2f}' if key in m else '-' for _, _, m in self.columns)]
                for label, key in self._rows()]
        return format_table(header, rows)

    def _rows(self) -> list[tuple[str, str]]:
        """``(label, key)`` of each row: the languages' ``metric``, then the means.

        Each dataset's means (``coco/mAR``) come before the mean over all of them (``mAR``,
        :class:`~xmr.engine.eval_loops.MultiDatasetValLoop`'s). Rows are labelled by their keys,
        without the dataset's prefix when the validation scores one dataset (``ja``, ``mAR``)
        and with it when several (``coco/ja``, ``cococn/zh``, ``coco/mAR``).
        """
        suffix = '/' + self.metric
        keys = list(dict.fromkeys(key for _, _, metrics in self.columns for key in metrics))
        languages = [key for key in keys if key.endswith(suffix)]
        means = sorted((key for key in keys
                        if key == self.mean_key or key.endswith('/' + self.mean_key)),
                       key=lambda key: key == self.mean_key)
        datasets = {key[:-len(suffix)].rpartition('/')[0] for key in languages}
        prefix = f'{datasets.pop()}/' if len(datasets) == 1 else ''
        return [(key[:-len(suffix)].removeprefix(prefix), key) for key in languages] + \
            [(key.removeprefix(prefix), key) for key in means]

    def _write(self, out: Path) -> None:
        if not is_main_process():  # a work dir is rank 0's (a node's own disk too)
            return
        atomic_write_text(out / 'phase_report.md', self.report() + '\n')
        atomic_write_text(out / 'phase_report.json', json.dumps(self._records(), indent=2))

    def _records(self) -> list[dict]:
        return [{'column': label, 'iter': step, 'metrics': m} for label, step, m in self.columns]

    def after_train(self, runner) -> None:
        if not self.columns:
            return
        runner.logger.info(f'{self.metric} per language across phases:\n{self.report()}')
        self._write(Path(runner.work_dir))


def warn_if_unreported(metric: str, metrics: dict) -> None:
    """Warn when the validation reports no ``<lang>/<metric>`` key (a misspelt ``metric``, or a
    protocol without it: ``text_to_video`` reports no AR): the table would have no language."""
    if any(key.endswith('/' + metric) for key in metrics):
        return
    reported = sorted({key.rpartition('/')[2] for key in metrics if '/' in key})
    print_log(f"PhaseReportHook: the validation reports no '<language>/{metric}'"
              f'{did_you_mean(metric, reported)}, so its table lists no language; set '
              "custom_hooks' PhaseReportHook(metric=...) to one it reports: "
              f"{', '.join(reported) or 'none'}", logger='current', level=logging.WARNING)


def _saved_records(path: Path) -> Any:
    """The columns an earlier xmr's run saved in its work dir's report ``path``.

    Raises:
        ValueError: the file is not UTF-8 or no JSON that Python reads, naming it, the fault
            and its place; it is left as it is (the resumed run would write over it).
    """
    try:
        return load_json(path)
    except JSONFileError as error:
        raise ValueError(f'{error}; it holds the columns of the phases before this resume: '
                         'repair it, or move it aside to resume without them') from error
