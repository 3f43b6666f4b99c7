"""A per-language table of retrieval before and after each phase, printed when training ends."""
from __future__ import annotations

import json
from pathlib import Path

from mmengine.hooks import Hook

from xmr.evaluation.leaderboard import format_table
from xmr.registry import HOOKS

__all__ = ['PhaseReportHook', 'format_table']


@HOOKS.register_module()
class PhaseReportHook(Hook):
    """Records every validation with the phase it belongs to and prints an AR table at the end.

    Columns are the validations in order (``<phase> start`` / ``<phase> end``); rows are the
    languages (the source language is the frozen teacher) and the mean over target languages.
    The table is also written to ``<work_dir>/phase_report.{md,json}``.

    Args:
        metric: per-language metric key suffix (``'{lang}/<metric>'``), default ``AR``.
        mean_key: key of the mean over target languages.
    """

    priority = 'LOW'

    def __init__(self, metric: str = 'AR', mean_key: str = 'mAR') -> None:
        self.metric = metric
        self.mean_key = mean_key
        self.columns: list[tuple[str, dict[str, float]]] = []

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
        self.columns.append((label, dict(metrics)))

    def table(self) -> str:
        suffix = '/' + self.metric
        langs: list[str] = []
        for _, metrics in self.columns:
            for key in metrics:
                lang = key.rsplit('/', 1)[0].split('/')[-1] if key.endswith(suffix) else None
                if lang and lang not in langs:
                    langs.append(lang)

        def value(metrics: dict, lang: str | None) -> str:
            hits = [v for k, v in metrics.items()
                    if (k.endswith(f'{lang}{suffix}') if lang else
                        k == self.mean_key or k.endswith('/' + self.mean_key))]
            return f'{hits[0]:.2f}' if hits else '-'

        header = ['language', *(label for label, _ in self.columns)]
        rows = [[lang, *(value(m, lang) for _, m in self.columns)] for lang in langs]
        rows.append([self.mean_key, *(value(m, None) for _, m in self.columns)])
        return format_table(header, rows)

    def after_train(self, runner) -> None:
        if not self.columns:
            return
        table = self.table()
        runner.logger.info(f'{self.metric} per language across phases:\n{table}')
        out = Path(runner.work_dir)
        (out / 'phase_report.md').write_text(table + '\n', encoding='utf-8')
        (out / 'phase_report.json').write_text(
            json.dumps([{'column': label, 'metrics': m} for label, m in self.columns], indent=2),
            encoding='utf-8')
