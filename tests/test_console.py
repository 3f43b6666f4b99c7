"""The ``xmr`` command: a bare ``xmr`` is a usage error, ``xmr --help`` is not."""
from __future__ import annotations

import pytest

from xmr.console import main


@pytest.mark.parametrize('argv, status', [([], 2), (['--help'], 0), (['-h'], 0)])
def test_the_listing_exits_2_without_a_command_and_0_when_asked_for(argv, status, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == status
    assert capsys.readouterr().out.startswith('usage: xmr COMMAND [ARGS...]\ncommands:\n')
