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
