"""A config's text formatted by yapf once, however often MMEngine shows it."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import mmengine.config.config as mmengine_config

__all__ = ['FormatOnce', 'format_config_text_once']


class FormatOnce:
    """yapf's ``FormatCode`` that keeps its ``size`` latest results, by source and options.

    MMEngine formats a config's text with yapf each time it shows it (``Config.pretty_text``):
    a run's dumped config, its log, its message hub, and every checkpoint's meta: five times
    before a run's first iteration, each the same text. That is 0.3 s each for
    ``configs/dasd/cclm_multi30k.py``, and 0.7 s for the tests' configs, whose data are written
    in them: a quarter of a 16-iteration tiny run. The text comes out as yapf wrote it.

    Args:
        format_code: yapf's ``FormatCode``.
        size: how many results to keep.
    """

    def __init__(self, format_code: Callable[..., tuple[str, bool]], size: int = 16) -> None:
        self.format_code, self.size = format_code, size
        self.results: OrderedDict[tuple[str, str], tuple[str, bool]] = OrderedDict()

    def __call__(self, source: str, **options: Any) -> tuple[str, bool]:
        key = (source, repr(options))
        if key in self.results:
            self.results.move_to_end(key)
        else:
            self.results[key] = self.format_code(source, **options)
            if len(self.results) > self.size:
                self.results.popitem(last=False)
        return self.results[key]


def format_config_text_once() -> None:
    """Make MMEngine's configs format their text through :class:`FormatOnce` (once per
    process)."""
    if not isinstance(mmengine_config.FormatCode, FormatOnce):
        mmengine_config.FormatCode = FormatOnce(mmengine_config.FormatCode)
