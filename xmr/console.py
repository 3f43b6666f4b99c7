"""The ``xmr`` command: the tools of the repository, run from anywhere once xmr is installed.

``xmr train CONFIG ...`` runs ``tools/train.py CONFIG ...`` (the packaged copy), and likewise
``xmr test``, ``xmr benchmark``, ``xmr cache_features``, ``xmr language_modules``,
``xmr visualize_features``; ``xmr data prepare_multi30k ...`` and ``xmr convert dasd_to_xmr ...``
run the scripts of ``tools/data`` and ``tools/convert``, and ``xmr dist_train CONFIG 4 ...``
(likewise ``dist_test``, ``slurm_train``, ``slurm_test``) the launch scripts of ``tools/``, which
start the tools in several processes (docs/distributed.md) with this interpreter. Every tool
keeps its own arguments, ``--help`` and error style.
"""
from __future__ import annotations

import difflib
import os
import runpy
import sys
from collections.abc import Sequence

from xmr.packaged import packaged_root, tool_path
from xmr.utils import cli
from xmr.utils.cli import print_for_reader

#: Sub-folders of ``tools/`` whose scripts are named after a second word.
GROUPS = ('data', 'convert')
#: The launch scripts of ``tools/``, run by bash (the rest of its ``.sh`` files are sourced by
#: these, or set up a GPU machine from a checkout).
LAUNCHERS = ('dist_train', 'dist_test', 'slurm_train', 'slurm_test')


def available() -> list[str]:
    """Every command ``xmr`` accepts (``train``, ``data prepare_multi30k``, ``dist_train``,
    ...)."""
    tools = packaged_root() / 'tools'
    names = sorted([p.stem for p in tools.glob('*.py')]
                   + [name for name in LAUNCHERS if (tools / f'{name}.sh').is_file()])
    for group in GROUPS:
        names += sorted(f'{group} {p.stem}' for p in (tools / group).glob('*.py'))
    return names


def main(argv: Sequence[str] | None = None) -> None:
    """Run the tool the first word(s) of ``argv`` name with the rest of ``argv``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ('-h', '--help'):
        _print_help()
        raise SystemExit(0 if args else 2)
    if args[0] in GROUPS and args[1:2] in (['-h'], ['--help']):
        _print_help(args[0])
        raise SystemExit(0)
    words = 2 if args[0] in GROUPS and len(args) > 1 else 1
    command = ' '.join(args[:words])
    if command not in available():
        print(f'error: xmr {command}: {_no_such_command(command)}', file=sys.stderr)
        raise SystemExit(2)
    if command in LAUNCHERS:
        _launch(command, args[1:])
    script = tool_path('/'.join(args[:words]) + '.py')
    sys.argv = [str(script), *args[words:]]
    cli.command_name = f'xmr {command}'  # `usage: xmr train ...`, as the user typed it
    runpy.run_path(str(script), run_name='__main__')


def _launch(name: str, args: list[str]) -> None:
    """Replace this process with bash running the launch script ``name``: the processes it
    starts run this interpreter (``PYTHON``, unless set), whose environment has xmr, which the
    ``python`` first on ``PATH`` may not (``xmr`` run by its path, no environment activated)."""
    script = str(tool_path(f'{name}.sh'))
    env = dict(os.environ, XMR_COMMAND=f'xmr {name}')
    env.setdefault('PYTHON', sys.executable)
    sys.stdout.flush()
    os.execvpe('bash', ['bash', script, *args], env)


def _no_such_command(command: str) -> str:
    """What to run instead of ``command``: a group's tools, or the nearest command."""
    commands = available()
    if command in GROUPS:
        return (f'name one of its tools: {", ".join(c for c in commands if c.startswith(command))}'
                f' (xmr {command} TOOL --help for its arguments)')
    close = difflib.get_close_matches(command, commands, n=1, cutoff=0.6)
    hint = f"did you mean 'xmr {close[0]}'? " if close else ''
    return f'no such command: {hint}run one of {", ".join(commands)}'


def _print_help(group: str | None = None) -> None:
    """The commands, or a group's (``xmr data --help``)."""
    usage, commands = 'xmr COMMAND', available()
    if group is not None:
        usage, commands = f'xmr {group} TOOL', [c for c in commands if c.startswith(f'{group} ')]
    print_for_reader(f'usage: {usage} [ARGS...]\ncommands:\n  ' + '\n  '.join(commands))
