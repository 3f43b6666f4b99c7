"""The ``xmr`` command: a bare ``xmr`` is a usage error, ``xmr --help`` is not; the tools it
runs name the tools they suggest as ``xmr`` commands."""
from __future__ import annotations

import sys

import pytest

from xmr.console import main
from xmr.utils import cli


@pytest.mark.parametrize('argv, status', [([], 2), (['--help'], 0), (['-h'], 0)])
def test_the_listing_exits_2_without_a_command_and_0_when_asked_for(argv, status, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == status
    assert capsys.readouterr().out.startswith('usage: xmr COMMAND [ARGS...]\ncommands:\n')


def test_an_error_names_the_tools_it_suggests_as_xmr_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, 'argv', sys.argv[:])  # the console sets them for the tool it runs
    monkeypatch.setattr(cli, 'command_name', None)
    checkpoint = tmp_path / 'epoch_1.pth'
    checkpoint.write_bytes(b'')
    with pytest.raises(SystemExit) as exit_info:
        main(['test', str(checkpoint), 'configs/demo/static_tiny-clip_synthetic.py'])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.endswith(
        'give the config first, then the checkpoint: xmr test CONFIG CHECKPOINT\n')


def test_a_grouped_tool_gets_the_arguments_after_its_two_words(monkeypatch, capsys):
    monkeypatch.setattr(sys, 'argv', sys.argv[:])  # the console sets them for the tool it runs
    monkeypatch.setattr(cli, 'command_name', None)
    with pytest.raises(SystemExit) as exit_info:
        main(['convert', 'dasd_to_xmr'])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith('usage: xmr convert dasd_to_xmr ')
    assert err.endswith('error: the following arguments are required: checkpoint, config, '
                        '--out\n')
