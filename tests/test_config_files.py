"""A fault in a config file's own text is named by file and line, whichever file of the
``_base_`` chain or which ``--ablation`` row holds it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO
from xmr.config_files import read_config_file
from xmr.run_config import load_run_config
from xmr.utils.cli import UserError

DEMO = REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'


def refused(place: str, problem: str) -> pytest.RaisesExc:
    return pytest.raises(UserError, match=f'^{re.escape(place)}: {re.escape(problem)}: '
                         'correct the config file there$')


def chain(folder: Path, base: str, leaf: str) -> tuple[Path, Path]:
    """``base.py`` holding ``base``, and ``leaf.py``, whose ``_base_`` it is, ``leaf``."""
    (folder / 'base.py').write_text(base)
    (folder / 'leaf.py').write_text(f"_base_ = ['./base.py']\n{leaf}")
    return folder / 'base.py', folder / 'leaf.py'


def test_a_syntax_error_names_the_file_of_the_chain_that_holds_it(tmp_path):
    """MMEngine parsed with no file name: it said '(<unknown>, line 2)' for the leaf and its
    bases alike."""
    base, leaf = chain(tmp_path, 'lr = 0.1\nx = dict(a=1\n', 'y = 1\n')
    with refused(f'{base}:2', "SyntaxError: '(' was never closed"):
        read_config_file(leaf)
    base.write_text('lr = 0.1\n')
    leaf.write_text("_base_ = ['./base.py']\n\n\ny = [1,\n")
    with refused(f'{leaf}:4', "SyntaxError: '[' was never closed"):
        read_config_file(leaf)


def test_an_error_the_text_raises_as_it_runs_names_its_line(tmp_path):
    base, leaf = chain(tmp_path, 'a = 1\nb = dict(**a)\n', 'foo = 2\nbar = undefined_name\n')
    with refused(f'{base}:2', 'TypeError: dict() argument after ** must be a mapping, not int'):
        read_config_file(leaf)
    base.write_text('a = 1\n')
    with refused(f'{leaf}:3', "NameError: name 'undefined_name' is not defined"):
        read_config_file(leaf)


def test_an_error_of_another_origin_is_left_as_it_was(tmp_path):
    """Only the text's own faults are named by line: MMEngine's checks of the chain keep
    their message (which names what it found)."""
    one, two = tmp_path / 'one.py', tmp_path / 'two.py'
    one.write_text('x = 1\n')
    two.write_text('x = 2\n')
    leaf = tmp_path / 'leaf.py'
    leaf.write_text("_base_ = ['./one.py', './two.py']\n")
    with pytest.raises(KeyError, match='Duplicate key is not allowed among bases'):
        read_config_file(leaf)


def test_the_run_config_names_a_fault_in_an_ablation_row(tmp_path):
    row = tmp_path / 'row.py'
    row.write_text("train_cfg = dict(phases={'0': dict(iters=5)}\n")
    with refused(f'{row}:1', "SyntaxError: '(' was never closed"):
        load_run_config(DEMO, ablations=[str(row)])
