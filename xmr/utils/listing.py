"""How an error or a log line names the items of a list that may be long (or those it repeats),
and counts them."""
from __future__ import annotations

from collections.abc import Hashable, Iterable

__all__ = ['counted', 'first_few', 'repeated']


def first_few(items: Iterable[str], shown: int = 3) -> str:
    """``'a, b, c and 12 more'``: the first ``shown`` of ``items`` in sorted order, and a count
    of the rest.

    A message names enough of a list to act on and counts the rest, so that 30,000 unreadable
    files or 400 unexpected checkpoint keys still make one readable line; sorted, the same
    items give the same line in whatever order a dict, a set or the ranks gathered them.
    """
    items = sorted(items)
    named = ', '.join(items[:shown])
    rest = len(items) - shown
    if rest <= 0:
        return named
    return f'{named} and {rest} more' if named else f'{rest} items'


def counted(count: int | float, noun: str) -> str:
    """``'1 file'``, ``'2 files'``, ``'0.5 epochs'``: a count and its noun, plural unless one."""
    return f'{count} {noun}{"s" * (count != 1)}'


def repeated(items: Iterable[Hashable]) -> list:
    """The items given more than once, each once, sorted: what an error about a list that
    must name each item once (a K, a fold, a direction) names."""
    items = list(items)
    return sorted({item for item in items if items.count(item) > 1})
