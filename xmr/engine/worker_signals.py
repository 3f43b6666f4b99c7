"""DataLoader worker processes that ignore the signals the main process handles, and the end of
a loader's persistent ones."""
from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any

__all__ = ['WORKER_IGNORED_SIGNALS', 'IgnoringWorkerInit', 'end_workers']

#: Signals the workers of a loader the main process stops itself ignore (a feature cache's
#: build, a gallery's encoding), as the training loaders' workers do: a scheduler's SIGTERM (or
#: a terminal's SIGINT) reaches every process of the job, and a worker it killed failed the
#: pass before the main process could stop it cleanly.
WORKER_IGNORED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class IgnoringWorkerInit:
    """A worker's ``worker_init_fn``: ignore ``signals``, then run the loader's own one.

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
        if self.init is not None:
            self.init(worker_id)


def end_workers(loader: Any) -> None:
    """End the persistent worker processes ``loader`` has started, if any: its next pass starts
    new ones, each with a copy of the dataset as it is then. The loader's own shutdown (an
    event and a message on their queues) ends them, whatever signals they ignore."""
    iterator = getattr(loader, '_iterator', None)
    if iterator is not None:
        iterator._shutdown_workers()
        loader._iterator = None
