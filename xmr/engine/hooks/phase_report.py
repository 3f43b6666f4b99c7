"""A per-language table of retrieval before and after each phase, printed when training ends."""
from __future__ import annotations

import json
from pathlib import Path

from mmengine.hooks import Hook

from xmr.evaluation.leaderboard import format_table
from xmr.fileio import atomic_write_text
from xmr.registry import HOOKS

__all__ = ['PhaseReportHook', 'format_table']


@HOOKS.register_module()
class PhaseReportHook(Hook):
    """Records every validation with the phase it belongs to and prints an AR table at the end.

    Columns are the validations in order (``<phase> start`` / ``<phase> end``); rows are the
    languages (the source language is the frozen teacher) and the mean over target languages.
    The table is written to ``<work_dir>/phase_report.{md,json}`` after every validation
    (atomically), and a resumed run reads the columns validated up to its checkpoint back from
    the JSON, so the report of an interrupted and resumed run is that of an uninterrupted one:
    a phase-end validation at the checkpoint's iteration is not run again on resume.

    Args:
        metric: per-language metric key suffix (``'{lang}/<metric>'``), default ``AR``.
        mean_key: key of the mean over target languages.
    """

    priority = 'LOW'

    def __init__(self, metric: str = 'AR', mean_key: str = 'mAR') -> None:
        self.metric = metric
        self.mean_key = mean_key
        #: ``(label, iteration, metrics)`` per validation, in order.
        self.columns: list[tuple[str, int, dict[str, float]]] = []

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
        # A resumed run validates a phase's start again: its column replaces the restored one.
        self.columns = [column for column in self.columns if column[0] != label]
        self.columns.append((label, runner.iter, dict(metrics)))
        self._write(Path(runner.work_dir))

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        saved = Path(runner.work_dir) / 'phase_report.json'
        if not runner._resume or not saved.is_file():
            return
        resumed_at = checkpoint['meta']['iter']
        self.columns = [(c['column'], c['iter'], c['metrics'])
                        for c in json.loads(saved.read_text(encoding='utf-8'))
                        if c['iter'] <= resumed_at]

    def table(self) -> str:
        suffix = '/' + self.metric
        langs: list[str] = []
        for _, _, metrics in self.columns:
            for key in metrics:
                lang = key.rsplit('/', 1)[0].split('/')[-1] if key.endswith(suffix) else None
                if lang and lang not in langs:
                    langs.append(lang)

        def value(metrics: dict, lang: str | None) -> str:
            hits = [v for k, v in metrics.items()
                    if (k.endswith(f'{lang}{suffix}') if lang else
                        k == self.mean_key or k.endswith('/' + self.mean_key))]
            return f'{hits[0]:.2f}' if hits else '-'

        header = ['language', *(label for label, _, _ in self.columns)]
        rows = [[lang, *(value(m, lang) for _, _, m in self.columns)] for lang in langs]
        rows.append([self.mean_key, *(value(m, None) for _, _, m in self.columns)])
        return format_table(header, rows)

    def _write(self, out: Path) -> None:
        atomic_write_text(out / 'phase_report.md', self.table() + '\n')
        atomic_write_text(out / 'phase_report.json', json.dumps(
            [{'column': label, 'iter': step, 'metrics': m} for label, step, m in self.columns],
            indent=2))

    def after_train(self, runner) -> None:
        if not self.columns:
            return
        runner.logger.info(f'{self.metric} per language across phases:\n{self.table()}')
        self._write(Path(runner.work_dir))
