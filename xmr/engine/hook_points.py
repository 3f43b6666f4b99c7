"""xmr's hook points beyond MMEngine's: methods a hook may define, called where it has them.

MMEngine's ``runner.call_hook(name)`` calls ``name`` on every hook and so needs every hook to
define it; a point of xmr's (``after_failed_train``, ``before_checkpoint_on_every_rank``) is
optional and reaches only the hooks that define it.
"""
from __future__ import annotations

import functools
import traceback
from collections.abc import Callable, Iterator
from typing import Any


def _defining(runner, name: str) -> Iterator[tuple[Any, Callable[[Any], None]]]:
    """Each hook of ``runner`` that defines ``name``, with that method, in priority order."""
    for hook in runner.hooks:
        method = getattr(hook, name, None)
        if method is not None:
            yield hook, method


def call_hook_point(runner, name: str) -> None:
    """``hook.<name>(runner)`` for each hook of ``runner`` that defines it, in priority order."""
    for _, method in _defining(runner, name):
        method(runner)


def call_failure_point(runner, name: str, failure: BaseException) -> None:
    """:func:`call_hook_point` while the run fails with ``failure``, which the caller re-raises.

    Each hook gives back what it holds (the work dir's lock, the SIGTERM handler) whatever the
    hooks before it did: an ``Exception`` one raises is logged with its traceback and added to
    ``failure`` as a note, and the hooks after it are still called. The run's own error stays
    the one raised and reported (a tool's ``error:`` line names it, not the handler's).
    A ``KeyboardInterrupt`` during the handlers stops them, as the user asked.

    Called once per failure: a second call for the same ``failure`` (the runner's, after the
    loop's) does nothing.
    """
    called = vars(failure).setdefault('_xmr_failure_points', set())
    if name in called:
        return
    called.add(name)
    for hook, method in _defining(runner, name):
        call_while_failing(runner, f'{type(hook).__name__}.{name}',
                           functools.partial(method, runner), failure)


def call_while_failing(runner, handler: str, function: Callable[[], Any],
                       failure: BaseException) -> None:
    """``function()``, named ``handler``, while the run fails with ``failure``, which the caller
    re-raises: an ``Exception`` it raises is logged with its traceback and noted on
    ``failure``, which stays the run's error (a ``KeyboardInterrupt`` goes through)."""
    try:
        function()
    except Exception as error:  # noqa: BLE001  (reported below; the run's error is raised)
        _report_handler_error(runner, handler, error, failure)


def _report_handler_error(runner, handler: str, error: Exception,
                          failure: BaseException) -> None:
    """Log ``handler``'s ``error`` with its own traceback and note it on ``failure``."""
    raised = f'{handler} raised {type(error).__name__}: {error}'
    # chain=False: the run's error, its context, is shown once, where it is raised.
    runner.logger.error(
        f'{raised} while the run was failing with {type(failure).__name__}: {failure}; the '
        f'other hooks were called all the same, and the run fails with its own error\n'
        + ''.join(traceback.format_exception(error, chain=False)).rstrip())
    failure.add_note(f'while handling it, {raised} (logged with its traceback)')
