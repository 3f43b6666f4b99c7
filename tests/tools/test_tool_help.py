"""Every option of every tool says what it does in ``--help``."""
from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / 'tools'
SCRIPTS = sorted(path.relative_to(TOOLS).as_posix() for path in TOOLS.rglob('*.py'))


class _Parsed(BaseException):
    """Stops a tool at its first parse: a BaseException, which the tools' error line lets
    through."""


def _unexplained(parser: argparse.ArgumentParser, prog: str) -> list[str]:
    """``'<prog> <option>'`` of each argument of ``parser`` (and its subcommands') without
    help; those hidden on purpose (``argparse.SUPPRESS``) are explained elsewhere."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _unexplained(sub, f'{prog} {name}')
        elif action.dest != 'help' and action.help is None:
            found.append(f'{prog} {"/".join(action.option_strings) or action.dest}')
    return found


def test_the_tools_are_found():
    assert {'train.py', 'test.py', 'data/prepare_multi30k.py',
            'benchmarks/loop_time.py'} <= set(SCRIPTS)


@pytest.mark.parametrize('script', SCRIPTS)
def test_every_option_of_the_tool_has_help(script, monkeypatch):
    """``prepare_multi30k.py --help`` listed --splits bare: that the task 2 splits (what MLA
    and DASD score) exist, and what each split holds, was in no --help."""
    parsers = []

    def first_parse(self, args=None, namespace=None):
        parsers.append(self)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, 'parse_known_args', first_parse)
    monkeypatch.setattr(sys, 'argv', [str(TOOLS / script)])
    with pytest.raises(_Parsed):
        runpy.run_path(str(TOOLS / script), run_name='__main__')
    assert _unexplained(parsers[0], script) == []
