"""A config's text formatted by yapf once, however often MMEngine shows it."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mmengine.config.config as mmengine_config

from xmr.utils.recent import RecentResults

__all__ = ['FormatOnce', 'format_config_text_once']


class FormatOnce:
    """yapf's ``FormatCode`` that keeps its ``size`` latest results, by source and options.

    MMEngine formats a config's text with yapf each time it shows it (``Config.pretty_text``):
    a run's dumped config, its log, its message hub, and every checkpoint's meta: five times
    before a run's first iteration, each the same text. That is 0.3 s each for
    ``configs/dasd/cclm_multi30k.py``, and up to 1.4 s for a text whose model holds a line
    longer than yapf's 79 columns (a test run's checkpoint path, given as its tokenizer's
    ``model_file``), which yapf searches every way to split: a quarter of a 16-iteration tiny
    run. The text comes out as yapf wrote it.

    Args:
        format_code: yapf's ``FormatCode``.
        size: how many results to keep.
    """

    def __init__(self, format_code: Callable[..., tuple[str, bool]], size: int = 16) -> None:
        self.format_code = format_code
        self.results: RecentResults[tuple[str, bool]] = RecentResults(size)

    def __call__(self, source: str, **options: Any) -> tuple[str, bool]:
        return self.results.get((source, repr(options)),
                                lambda: self.format_code(source, **options))


def format_config_text_once() -> None:
    """Make MMEngine's configs format their text through :class:`FormatOnce` (once per
    process)."""
    if not isinstance(mmengine_config.FormatCode, FormatOnce):
        mmengine_config.FormatCode = FormatOnce(mmengine_config.FormatCode)
