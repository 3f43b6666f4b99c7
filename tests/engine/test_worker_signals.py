"""Workers that ignore the job's stop signals do so from their birth: one signalled before its
init runs lives on, under a tool's SIGTERM handler too."""
from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from xmr.engine.worker_signals import (
    WORKER_IGNORED_SIGNALS,
    BlockedSignalsContext,
    IgnoringWorkerInit,
    ignore_in_workers,
)
from xmr.utils import cli


def held_worker_loop(started: Path, go: Path, loop, *args, **kwargs) -> None:
    """A worker held before torch's loop (so before its init): it says it started, then waits
    for ``go``."""
    (started / str(os.getpid())).touch()
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    loop(*args, **kwargs)


def test_a_worker_signalled_before_its_init_ignores_the_signal(tmp_path, monkeypatch):
    """A scheduler's SIGTERM (a terminal's Ctrl-C) that reached a worker of a pass just
    started, before its init made it ignore the signal, killed it: the pass failed with
    'DataLoader worker is killed by signal', under the tool's one line (CI's SIGTERM test of
    tools/test.py, now and then). Under the tool's handler, whose child gets the default."""
    from torch.utils.data._utils import worker

    started, go = tmp_path / 'started', tmp_path / 'go'
    started.mkdir()
    loop = worker._worker_loop
    monkeypatch.setattr(worker, '_worker_loop',
                        lambda *args, **kwargs: held_worker_loop(started, go, loop, *args,
                                                                 **kwargs))
    loader = DataLoader(range(8), batch_size=2, num_workers=2,
                        multiprocessing_context=multiprocessing.get_context('fork'))
    ignore_in_workers(loader, WORKER_IGNORED_SIGNALS)
    with cli.sigterm_interrupts():
        batches = iter(loader)
        try:
            deadline = time.monotonic() + 60
            while len(list(started.iterdir())) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            for process in batches._workers:
                os.kill(process.pid, signal.SIGTERM)
                os.kill(process.pid, signal.SIGINT)
            go.touch()
            assert [batch.tolist() for batch in batches] == [[0, 1], [2, 3], [4, 5], [6, 7]]
        finally:
            batches._shutdown_workers()
        assert not set(WORKER_IGNORED_SIGNALS) & signal.pthread_sigmask(signal.SIG_BLOCK, [])


def report_start(queue) -> None:
    queue.put((signal.pthread_sigmask(signal.SIG_BLOCK, []),
               multiprocessing.get_start_method(allow_none=True)))


@pytest.mark.parametrize('method', ['fork', 'spawn'])
def test_processes_start_with_the_signals_blocked_and_of_their_start_method(method):
    """Blocked in the thread that starts the process, and through ``exec`` (spawn); the parent's
    mask is its own again after."""
    inner = multiprocessing.get_context(method)
    context = BlockedSignalsContext(inner, [signal.SIGTERM])
    assert context.get_start_method() == method
    queue = context.Queue()
    process = context.Process(target=report_start, args=(queue,), daemon=True)
    process.start()
    blocked, start_method = queue.get(timeout=60)
    process.join(60)
    assert process.exitcode == 0
    assert signal.SIGTERM in blocked and signal.SIGINT not in blocked
    assert start_method == method
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_the_workers_are_made_to_ignore_once_and_a_forkserver_s_context_is_kept():
    """A second phase on the same loader wraps nothing again; a forkserver forks the workers
    itself, from its own mask, so blocking in this process would reach none of them."""
    loader = DataLoader(range(4), num_workers=1)
    ignore_in_workers(loader, [signal.SIGTERM])
    init, context = loader.worker_init_fn, loader.multiprocessing_context
    ignore_in_workers(loader, [signal.SIGTERM])
    assert (loader.worker_init_fn, loader.multiprocessing_context) == (init, context)
    assert isinstance(init, IgnoringWorkerInit) and isinstance(context, BlockedSignalsContext)
    assert context.context is multiprocessing.get_context()  # DataLoader's default

    forkserver = multiprocessing.get_context('forkserver')
    loader = DataLoader(range(4), num_workers=1, multiprocessing_context=forkserver)
    ignore_in_workers(loader, [signal.SIGTERM])
    assert isinstance(loader.worker_init_fn, IgnoringWorkerInit)
    assert loader.multiprocessing_context is forkserver

