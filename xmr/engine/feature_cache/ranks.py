"""The ranks of a DDP job building one feature cache together: the rows each encodes, and the
steps whose failure on one rank fails every rank, naming it."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch.distributed as dist

from xmr.fileio import atomic_write_text

#: Name of the file a rank that failed while encoding leaves in the build folder (with its rank
#: after it), which the others look for between their batches.
FAILED_MARKER = 'failed-rank-'


class RankFailedError(RuntimeError):
    """Another rank failed during a step of a feature cache build this rank took part in."""


class _OtherRankFailed(Exception):
    """Stops this rank's encoding when another rank's failure marker appears."""


def rank_rows(count: int, batch_size: int, rank: int, world: int) -> range:
    """The rows of ``count`` that ``rank`` of ``world`` encodes: a contiguous run of whole
    batches of ``batch_size``, about ``count / world`` of them.

    Every forward pass of a rank is then one that a single process makes (the same rows, padded
    to the same width), so the features are bit for bit a single process's.
    """
    batches = -(-count // batch_size)
    return range(min(batches * rank // world * batch_size, count),
                 min(batches * (rank + 1) // world * batch_size, count))


class BuildStep:
    """One step of a build on this rank: the ``result`` it shares, then every rank's.

    Args:
        markers: the folder where a rank that fails leaves its marker (:data:`FAILED_MARKER`)
            for :meth:`stop_if_another_failed`; ``None`` for a step that leaves none.
    """

    def __init__(self, markers: Path | None) -> None:
        self.markers = markers
        self.result: Any = None
        #: ``[world]``: each rank's ``result``, once the step is over on every rank.
        self.results: list[Any] = []

    def stop_if_another_failed(self) -> None:
        """Stop this rank's part (called between batches) when another rank has failed, so that
        it fails within a batch rather than after its whole share of the rows."""
        if self.markers is not None and any(self.markers.glob(f'{FAILED_MARKER}*')):
            raise _OtherRankFailed


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

        A rank whose body raises leaves its marker in ``markers`` and raises its own error; each
        other rank raises :class:`RankFailedError` naming it and that error, at the end of the
        step (or between two batches, :meth:`BuildStep.stop_if_another_failed`) instead of
        waiting for it at a later collective until the group's timeout.

        Args:
            doing: what the ranks do in the step (``'encoding its rows'``), for the error.
            markers: the folder for the failure markers (the build folder, every rank's).
        """
        # One process has no other rank to stop for.
        step = BuildStep(markers if self.group is not None else None)
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
        own = error is not None and not isinstance(error, _OtherRankFailed)
        failure = f'{type(error).__name__}: {error}' if own else None
        if own and step.markers is not None:
            # Only a speed-up: the exchange below tells every rank, once each has finished.
            with contextlib.suppress(OSError):
                atomic_write_text(step.markers / f'{FAILED_MARKER}{self.rank}', failure)
        shared: list[Any] = [None] * self.world
        dist.all_gather_object(shared, (step.result, failure), group=self.group)
        step.results = [result for result, _ in shared]
        failed = {rank: failure for rank, (_, failure) in enumerate(shared) if failure}
        if failed and not own:
            raise RankFailedError(
                f'feature cache {self.cache}: '
                + '; '.join(f'rank {rank} failed while {doing}: {failure}'
                            for rank, failure in failed.items())
                + f'. Rank {self.rank} stops too; the failing rank\'s log holds the traceback.'
            ) from None
