"""RecentResults: the latest results by key, the least recently used dropped first."""
from __future__ import annotations

import pytest

from xmr.utils.recent import RecentResults


def test_the_latest_results_are_kept_the_least_recently_used_going_first():
    computed = []

    def compute(key):
        def result():
            computed.append(key)
            return key.upper()
        return result

    recent = RecentResults(size=2)
    assert recent.get('a', compute('a')) == 'A'
    assert recent.get('b', compute('b')) == 'B'
    assert recent.get('a', compute('a')) == 'A'  # kept, and now the latest used
    assert recent.get('c', compute('c')) == 'C'  # drops 'b'
    assert recent.get('a', compute('a')) == 'A'
    assert recent.get('b', compute('b')) == 'B'  # computed again; drops 'c'
    assert computed == ['a', 'b', 'c', 'b']
    assert list(recent.results) == ['a', 'b']


def test_a_computation_that_raises_keeps_nothing():
    recent = RecentResults(size=2)

    def fails():
        raise ValueError('no result')

    with pytest.raises(ValueError, match='no result'):
        recent.get('a', fails)
    assert recent.get('a', lambda: 1) == 1 and list(recent.results) == ['a']
