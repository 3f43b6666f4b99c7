"""tools/benchmarks/eval_search.py: its options checked before the first row."""
from __future__ import annotations

import pytest

from tests.conftest import benchmark_script

eval_search = benchmark_script('eval_search')


@pytest.mark.parametrize('argv, message', [
    (['--cases', '100x10,1000by10'], "bad case '1000by10': expected QUERIESxGALLERY"),
    (['--cases', '100x10,0x10'], "bad case '0x10': sizes must be positive"),
    (['--methods', 'ranks,exact'], "unknown methods ['exact']"),
])
def test_a_bad_case_or_method_is_refused_before_the_first_row(monkeypatch, argv, message):
    """A bad case after the first was read once the rows of those before it had run (minutes
    at the default sizes), and their figures were lost with the error."""
    monkeypatch.setattr(eval_search.subprocess, 'run',
                        lambda *args, **kwargs: pytest.fail('a row ran'))
    with pytest.raises(SystemExit, match=message.replace('[', r'\[').replace(']', r'\]')):
        eval_search.main(argv)


@pytest.mark.parametrize('k', ['0', '-3', 'ten'])
def test_a_k_below_one_is_a_usage_error_naming_it(monkeypatch, capsys, k):
    """``--k 0`` ran each top-k row's subprocess to fail there, the table lost, with FaissSearcher's
    ``k must be in [1, 5]``, which names no flag."""
    monkeypatch.setattr(eval_search.subprocess, 'run',
                        lambda *args, **kwargs: pytest.fail('a row ran'))
    with pytest.raises(SystemExit) as exit_:
        eval_search.main(['--cases', '10x5', '--methods', 'flat', '--k', k])
    assert exit_.value.code == 2
    assert f"argument --k: '{k}' is no whole number >= 1" in capsys.readouterr().err
