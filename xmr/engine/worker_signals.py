"""DataLoader worker processes that ignore the signals the main process handles, and the end of
a loader's persistent ones."""
from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Sequence
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ['WORKER_IGNORED_SIGNALS', 'IgnoringWorkerInit', 'end_workers', 'ignore_in_workers']

#: Signals the workers of a loader the main process stops itself ignore (a feature cache's
#: build, a gallery's encoding), as the training loaders' workers do: a scheduler's SIGTERM (or
#: a terminal's SIGINT) reaches every process of the job, and a worker it killed failed the
#: pass before the main process could stop it cleanly.
WORKER_IGNORED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def ignore_in_workers(loader: Any, signals: Sequence[int]) -> None:
    """Make ``loader``'s worker processes ignore ``signals`` (once, however often it is
    called): their init (:class:`IgnoringWorkerInit`) ignores them, and, unless the start
    method is ``forkserver``, they start with the signals blocked
    (:class:`BlockedSignalsContext`), so that one sent before the init waits and is dropped.
    A forkserver's workers are forked by its server, with its own mask: one signalled before
    its init dies of it."""
    if not loader.num_workers or not signals or isinstance(loader.worker_init_fn,
                                                           IgnoringWorkerInit):
        return
    loader.worker_init_fn = IgnoringWorkerInit(signals, loader.worker_init_fn)
    context = loader.multiprocessing_context or multiprocessing.get_context()
    if context.get_start_method() != 'forkserver':
        loader.multiprocessing_context = BlockedSignalsContext(context, signals)


class IgnoringWorkerInit:
    """A worker's ``worker_init_fn``: ignore ``signals``, unblock them, then run the loader's
    own one.

    PyTorch installs its own SIGTERM handler in each worker, which kills it; this runs after.
    A scheduler signals every process of a job, and a worker killed so fails the pass that
    reads from it: ignoring leaves the signal to the main process, and the workers end with it.

    Args:
        signals: the signal numbers to ignore.
        init: the loader's own ``worker_init_fn`` (``None``: none).
    """

    def __init__(self, signals: Sequence[int], init: Any = None) -> None:
        self.signals, self.init = list(signals), init

    def __call__(self, worker_id: int) -> None:
        for number in self.signals:
            signal.signal(number, signal.SIG_IGN)
        # Ignored first: a signal the worker's start held back is then dropped, not delivered.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, self.signals)
        if self.init is not None:
            self.init(worker_id)


class BlockedSignalsContext(BaseContext):
    """The multiprocessing ``context`` (its start method, queues and events), whose processes
    start with ``signals`` blocked: kept through ``fork`` and ``exec``, until the process
    unblocks them.

    A DataLoader worker ignores the job's stop signals only once its init runs: a scheduler's
    SIGTERM that came before (the workers of a pass just started) killed it, and the pass
    failed with 'DataLoader worker is killed by signal', under the tool's one line.

    Args:
        context: the context whose start method and objects are used.
        signals: the signal numbers the processes start with blocked.
    """

    def __init__(self, context: BaseContext, signals: Sequence[int]) -> None:
        self.context, self.signals = context, tuple(signals)

    def get_context(self, method: str | None = None) -> BaseContext:
        return self.context.get_context(method)

    def get_start_method(self, allow_none: bool = False) -> str | None:
        return self.context.get_start_method(allow_none)

    def Process(self, *args: Any, **kwargs: Any) -> BaseProcess:  # noqa: N802 (multiprocessing's name)
        return _BlockedSignalsProcess(self.get_context().Process, self.signals, *args,
                                      **kwargs)


class _BlockedSignalsProcess(BaseProcess):
    """A process of class ``started_as`` (a context's ``Process``) that starts with ``signals``
    blocked in the thread starting it, whose mask is restored after. One class here, not a
    subclass made per ``started_as``: a spawned process is pickled to its child, which finds
    the class by its module and name."""

    def __init__(self, started_as: type[BaseProcess], signals: Sequence[int], *args: Any,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started_as, self.signals = started_as, tuple(signals)
        self._start_method = started_as._start_method  # a spawned child's multiprocessing's

    def _Popen(self, process: BaseProcess) -> Any:  # noqa: N802 (multiprocessing's name)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, self.signals)
        try:
            return self.started_as._Popen(process)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def _after_fork(self) -> None:
        self.started_as._after_fork()


def end_workers(loader: Any) -> None:
    """End the persistent worker processes ``loader`` has started, if any: its next pass starts
    new ones, each with a copy of the dataset as it is then. The loader's own shutdown (an
    event and a message on their queues) ends them, whatever signals they ignore."""
    iterator = getattr(loader, '_iterator', None)
    if iterator is not None:
        iterator._shutdown_workers()
        loader._iterator = None
