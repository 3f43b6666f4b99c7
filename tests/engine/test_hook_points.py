"""xmr's hook points: an optional point reaches every hook that defines it, in priority order;
a failure handler that raises keeps neither the next handlers from running nor the run's error."""
from __future__ import annotations

from types import SimpleNamespace

from xmr.engine.hook_points import call_failure_point, call_hook_point


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


class Raises:
    """A hook whose ``after_failed_train`` fails, as an own hook's closing a server may."""

    def after_failed_train(self, runner) -> None:
        raise ConnectionError('tracking server unreachable')


class Logger:
    """Records what is logged as an error."""

    def __init__(self) -> None:
        self.errors = []

    def error(self, message: str) -> None:
        self.errors.append(message)


def test_a_failure_handler_that_raises_is_logged_and_noted_and_the_next_handlers_still_run():
    calls = []
    runner = SimpleNamespace(hooks=[Defines('lock', calls), Raises(), Defines('sigterm', calls)],
                             logger=Logger())
    failure = RuntimeError('disk full')
    call_failure_point(runner, 'after_failed_train', failure)
    assert calls == [('lock', runner), ('sigterm', runner)]
    assert failure.__notes__ == ['while handling it, Raises.after_failed_train raised '
                                 'ConnectionError: tracking server unreachable (logged with its '
                                 'traceback)']
    [logged] = runner.logger.errors
    assert logged.startswith('Raises.after_failed_train raised ConnectionError: tracking server '
                             'unreachable while the run was failing with RuntimeError: disk full')
    assert 'in after_failed_train' in logged  # the handler's own traceback
    assert logged.endswith('ConnectionError: tracking server unreachable')


def test_a_failure_point_runs_once_per_failure_whoever_calls_it_again():
    """PhasedTrainLoop calls it for runs under MMEngine's Runner, xmr's runner for every loop:
    under both, one failure reaches each hook once; another failure reaches it again."""
    calls = []
    runner = SimpleNamespace(hooks=[Defines('lock', calls)])
    failure = KeyboardInterrupt()
    for _ in range(2):
        call_failure_point(runner, 'after_failed_train', failure)
    assert calls == [('lock', runner)]
    call_failure_point(runner, 'after_failed_train', RuntimeError('the next run'))
    assert len(calls) == 2
