"""call_hook_point: an optional hook point reaches every hook that defines it, in priority order."""
from __future__ import annotations

from types import SimpleNamespace

from xmr.engine.hook_points import call_hook_point


class Defines:
    """A hook with the point ``after_failed_train``, recording the calls it gets."""

    def __init__(self, name: str, calls: list) -> None:
        self.name, self.calls = name, calls

    def after_failed_train(self, runner) -> None:
        self.calls.append((self.name, runner))


def test_every_hook_that_defines_the_point_is_called_in_the_runners_order_and_others_skipped():
    calls = []
    runner = SimpleNamespace(hooks=[Defines('highest', calls), object(), Defines('lowest', calls)])
    call_hook_point(runner, 'after_failed_train')
    assert calls == [('highest', runner), ('lowest', runner)]
