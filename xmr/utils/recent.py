"""The latest results of a costly computation, kept by key."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ['RecentResults']

Result = TypeVar('Result')


class RecentResults(Generic[Result]):
    """The ``size`` latest results, by key: a result used again becomes the latest, and the
    one least recently used goes when a new one would make ``size + 1``. A computation that
    raises keeps nothing.

    Args:
        size: how many results to keep.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.results: OrderedDict[Hashable, Result] = OrderedDict()

    def get(self, key: Hashable, compute: Callable[[], Result]) -> Result:
        """The result kept for ``key``, else ``compute()``, then kept."""
        if key in self.results:
            self.results.move_to_end(key)
        else:
            self.results[key] = compute()
            if len(self.results) > self.size:
                self.results.popitem(last=False)
        return self.results[key]
