"""A converter run again where texts were attached to its output since."""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest


def assert_a_rerun_keeps(path: Path, convert: Callable[[], None], key: str,
                         langs: list[str]) -> None:
    """``convert`` (the first run's command again) refuses to replace ``path``, naming the
    ``key`` (``translation_langs``, ``back_translation_langs``) and ``langs`` it would lose,
    and leaves the file as it was."""
    attached = path.read_bytes()
    with pytest.raises(SystemExit, match=(
            rf'{re.escape(path.name)}: holds texts attached after its conversion '
            rf'\({key} {re.escape(str(langs))}\) .* it is kept: move it away first')):
        convert()
    assert path.read_bytes() == attached
