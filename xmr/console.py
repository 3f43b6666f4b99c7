"""The ``xmr`` command: the tools of the repository, run from anywhere once xmr is installed.

``xmr train CONFIG ...`` runs ``tools/train.py CONFIG ...`` (the packaged copy), and likewise
``xmr test``, ``xmr benchmark``, ``xmr cache_features``, ``xmr language_modules``,
``xmr visualize_features``; ``xmr data prepare_multi30k ...`` and ``xmr convert dasd_to_xmr ...``
run the scripts of ``tools/data`` and ``tools/convert``. Every tool keeps its own arguments,
``--help`` and error style.
"""
from __future__ import annotations

import runpy
import sys
from collections.abc import Sequence

from xmr.packaged import packaged_root, tool_path

#: Sub-folders of ``tools/`` whose scripts are named after a second word.
GROUPS = ('data', 'convert')


def available() -> list[str]:
    """Every command ``xmr`` accepts (``train``, ``data prepare_multi30k``, ...)."""
    tools = packaged_root() / 'tools'
    names = sorted(p.stem for p in tools.glob('*.py'))
    for group in GROUPS:
        names += sorted(f'{group} {p.stem}' for p in (tools / group).glob('*.py'))
    return names


def main(argv: Sequence[str] | None = None) -> None:
    """Run the tool the first word(s) of ``argv`` name with the rest of ``argv``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ('-h', '--help'):
        print('usage: xmr COMMAND [ARGS...]\ncommands:\n  ' + '\n  '.join(available()))
        raise SystemExit(0 if args else 2)
    words = 2 if args[0] in GROUPS and len(args) > 1 else 1
    name = '/'.join(args[:words]) + '.py'
    if f"{' '.join(args[:words])}" not in available():
        print(f"error: xmr {' '.join(args[:words])}: no such command: run one of "
              f"{', '.join(available())}", file=sys.stderr)
        raise SystemExit(2)
    script = tool_path(name)
    sys.argv = [str(script), *args[words:]]
    runpy.run_path(str(script), run_name='__main__')
