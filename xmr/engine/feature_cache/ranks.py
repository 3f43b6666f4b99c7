"""The ranks of a DDP job building one feature cache together: the rows each encodes, and the
steps whose failure on one rank fails every rank, naming it."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from xmr.fileio import atomic_write_text

#: Name of the file a rank that failed while encoding leaves in the build folder (with its rank
#: after it), which the others look for between their batches.
FAILED_MARKER = 'failed-rank-'

#: The tag of the message by which a rank tells each other rank that it has ended a step.
ENDED_TAG = 1


class RankFailedError(RuntimeError):
    """Another rank failed during a step of a feature cache build this rank took part in."""


class RankStoppedError(RankFailedError):
    """Another rank stopped without failing (interrupted, or its process ended without an
    error: killed): the build is stopped, not failed, and its folder is kept for the next."""


class OtherRankFailed(Exception):
    """Stops this rank's encoding when another rank has failed or its process is gone
    (:meth:`BuildStep.stop_if_another_failed`): no failure of this rank's own."""


def rank_rows(count: int, batch_size: int, rank: int, world: int) -> range:
    """The rows of ``count`` that ``rank`` of ``world`` encodes: a contiguous run of whole
    batches of ``batch_size``, about ``count / world`` of them.

    Every forward pass of a rank is then one that a single process makes (the same rows, padded
    to the same width), so the features are bit for bit a single process's.
    """
    batches = -(-count // batch_size)
    return range(min(batches * rank // world * batch_size, count),
                 min(batches * (rank + 1) // world * batch_size, count))


class PeerWatch:
    """Every other rank's word that it has ended a step, awaited from the step's start, each in
    a thread of its own (``feature-cache-watch-rank-<rank>``), so that a rank whose process
    ends without a word (killed outright: SIGKILL, the out-of-memory killer) is known at once:
    gloo fails the wait when the connection to it closes. A rank still at the step when the
    group's timeout (from the step's start) runs out fails it the same way.

    Args:
        group: the gloo group of every rank.
    """

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group = group
        rank = dist.get_rank(group)
        self.peers = [peer for peer in range(dist.get_world_size(group)) if peer != rank]
        #: ``{rank: gloo's error}``: the ranks found gone, written by the threads.
        self.gone: dict[int, str] = {}
        self._threads = [threading.Thread(
            target=self._await, daemon=True, name=f'feature-cache-watch-rank-{peer}',
            args=(peer, dist.irecv(torch.zeros(1), group=group, group_src=peer, tag=ENDED_TAG)))
            for peer in self.peers]
        for thread in self._threads:
            thread.start()

    def _await(self, peer: int, ended: dist.Work) -> None:
        try:
            ended.wait()
        except RuntimeError as error:
            self.gone[peer] = str(error)

    def end(self) -> dict[int, str]:
        """Tell every other rank that this one has ended the step, and wait until each has too
        or is gone; return those gone (:attr:`gone`)."""
        sent = {peer: dist.isend(torch.ones(1), group=self.group, group_dst=peer, tag=ENDED_TAG)
                for peer in self.peers if peer not in self.gone}
        for thread in self._threads:
            thread.join()
        for peer, work in sent.items():
            try:
                work.wait()
            except RuntimeError as error:
                self.gone.setdefault(peer, str(error))
        return self.gone


class BuildStep:
    """One step of a build on this rank: the ``result`` it shares, then every rank's.

    Args:
        markers: the folder where a rank that fails leaves its marker (:data:`FAILED_MARKER`)
            for :meth:`stop_if_another_failed`; ``None`` for a step that leaves none.
        watch: the other ranks' processes, watched through the step; ``None``: one process.
    """

    def __init__(self, markers: Path | None, watch: PeerWatch | None = None) -> None:
        self.markers, self.watch = markers, watch
        self.result: Any = None
        #: ``[world]``: each rank's ``result``, once the step is over on every rank.
        self.results: list[Any] = []

    def stop_if_another_failed(self) -> None:
        """Stop this rank's part (called between batches) when another rank has failed or its
        process is gone, so that it fails within a batch rather than after its whole share of
        the rows."""
        if self.watch is not None and self.watch.gone or self.markers is not None and any(
                self.markers.glob(f'{FAILED_MARKER}*')):
            raise OtherRankFailed


class BuildRanks:
    """The ranks building one cache: this process is ``rank`` of ``world``, and the ranks tell
    each other the outcome of every step through ``group``.

    Args:
        cache: the cache folder, named in the errors.
        group: a gloo group of every rank, whose timeout bounds the wait for the slowest rank
            (:data:`~xmr.engine.feature_cache.dataset.BUILD_WAIT`); ``None``: one process.
    """

    def __init__(self, cache: Path, group: dist.ProcessGroup | None = None) -> None:
        self.cache, self.group = cache, group
        self.rank = 0 if group is None else dist.get_rank(group)
        self.world = 1 if group is None else dist.get_world_size(group)

    @contextlib.contextmanager
    def step(self, doing: str, markers: Path | None = None) -> Iterator[BuildStep]:
        """Run the body on this rank, then wait for every rank to finish it.

        A rank whose body raises an ``Exception`` leaves its marker in ``markers`` (an
        interruption, which keeps the folder, leaves none) and raises its own error; each
        other rank raises :class:`RankFailedError` naming it and that error, at the end of the
        step (or between two batches, :meth:`BuildStep.stop_if_another_failed`) instead of
        waiting for it at a later collective until the group's timeout. A rank whose process
        ends without an error (killed) is named the same way, at once (:class:`PeerWatch`),
        rather than when the others reach the step's end, with gloo's message.

        Args:
            doing: what the ranks do in the step (``'encoding its rows'``), for the error.
            markers: the folder for the failure markers (the build folder, every rank's).
        """
        # One process has no other rank to stop for.
        step = (BuildStep(None) if self.group is None
                else BuildStep(markers, PeerWatch(self.group)))
        try:
            yield step
        except BaseException as error:
            self._end(step, doing, error)
            raise
        self._end(step, doing, None)

    def _end(self, step: BuildStep, doing: str, error: BaseException | None) -> None:
        """Tell every rank this one's ``result`` and ``error``; raise if another rank failed."""
        if self.group is None:
            step.results = [step.result]
            return
        own = error is not None and not isinstance(error, OtherRankFailed)
        failure = f'{type(error).__name__}: {error}' if own else None
        stopped = own and not isinstance(error, Exception)
        # Only a speed-up: the exchange below tells every rank, once each has finished. None for
        # an interruption (Ctrl-C, SystemExit): it keeps the build folder for the next build,
        # whose ranks would take the marker for a failure of their own.
        if own and not stopped and step.markers is not None:
            with contextlib.suppress(OSError):
                atomic_write_text(step.markers / f'{FAILED_MARKER}{self.rank}', failure)
        gone = step.watch.end()
        if gone:
            # The exchange below would fail on the closed connections, with gloo's message.
            if not own:
                self._raise_gone(gone, doing)
            return
        shared: list[Any] = [None] * self.world
        dist.all_gather_object(shared, (step.result, failure, stopped), group=self.group)
        step.results = [result for result, _, _ in shared]
        failed = {rank: failure for rank, (_, failure, _) in enumerate(shared) if failure}
        if failed and not own:
            # Only interruptions: the build is stopped, as if this rank were interrupted too.
            error_type = (RankStoppedError if all(shared[rank][2] for rank in failed)
                          else RankFailedError)
            raise error_type(
                f'feature cache {self.cache}: '
                + '; '.join(f"rank {rank} {'was interrupted' if shared[rank][2] else 'failed'} "
                            f'while {doing}: {failure}' for rank, failure in failed.items())
                + f'. Rank {self.rank} stops too; the failing rank\'s log holds the traceback.'
            ) from None

    def _raise_gone(self, gone: dict[int, str], doing: str) -> None:
        """Raise :class:`RankStoppedError` naming the ranks whose processes ended or outlasted
        the group's timeout (``gone``: gloo's error for each, which tells which): a build
        stopped so keeps its folder, as one whose every rank was killed."""
        raise RankStoppedError(
            f'feature cache {self.cache}: '
            + '; '.join(f'rank {rank} ended while {doing} without reporting an error, or stopped '
                        f'answering (gloo: {error})' for rank, error in gone.items())
            + f'. Rank {self.rank} stops too. A process killed outright (SIGKILL, the '
            'out-of-memory killer) tells no error: its log and its node\'s system log (dmesg: '
            '"Out of memory: Killed process") tell why it ended.') from None
