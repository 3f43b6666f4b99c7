"""What a feature cache build has written so far, recorded in its folder as it goes, so that a
build stopped there (Ctrl-C, a scheduler's kill) is gone on with, not begun again.

A build folder records the build it holds (``build.json``: the cache key, the world size and the
batch size, which decide each rank's rows and batches) and each rank's rows written per feature
kind (``progress.json`` in the rank's own folder), recorded after its arrays are flushed.
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.fileio import atomic_write_text

#: The record of the build a folder holds.
BUILD_RECORD = 'build.json'
#: A rank's record of the rows it has written, in its folder.
PROGRESS_RECORD = 'progress.json'
#: Seconds between two records of a rank's progress: each flushes the arrays to disk first.
PROGRESS_SECONDS = 30.0

__all__ = ['BUILD_RECORD', 'PROGRESS_RECORD', 'PROGRESS_SECONDS', 'RankProgress', 'build_record',
           'records_build']


def build_record(key: Mapping[str, Any], world: int, batch_size: int) -> dict[str, Any]:
    """What a build folder records of its build, as JSON reads it back: a build goes on with
    the rows of another only when the two records are equal (the same features of the same
    items, split among as many ranks in batches of the same size, so that each batch is the one
    an uninterrupted build encodes)."""
    return json.loads(json.dumps(dict(key=key, world=world, batch_size=batch_size)))


def records_build(folder: Path, record: Mapping[str, Any]) -> bool:
    """Whether ``folder`` holds the rows of the build ``record`` describes."""
    try:
        return json.loads((folder / BUILD_RECORD).read_text()) == record
    except (OSError, ValueError):
        return False


class RankProgress:
    """The rows one rank has written of each feature kind, in its folder.

    Args:
        folder: the rank's folder (rank 0: the build folder; another rank: its shard folder).
    """

    def __init__(self, folder: Path) -> None:
        self.file = folder / PROGRESS_RECORD
        self.kinds: dict[str, dict[str, Any]] = (
            json.loads(self.file.read_text()) if self.file.is_file() else {})
        self._recorded_at = time.monotonic()
        #: The latest rows written of each kind not yet recorded (:meth:`record_latest`).
        self._latest: dict[str, tuple[int, np.ndarray | None, dict[int, SkippedMedia]]] = {}

    def rows_done(self, kind: str) -> int:
        """How many of this rank's rows of ``kind`` are written (whole batches)."""
        return self.kinds.get(kind, {}).get('rows', 0)

    def width(self, kind: str) -> int | None:
        """The width of the rank's ``kind`` array, once it holds rows."""
        return self.kinds.get(kind, {}).get('width')

    def unreadable(self, kind: str) -> dict[int, SkippedMedia]:
        """The rows whose media could not be read so far, with their markers."""
        return {int(row): SkippedMedia(*marker)
                for row, marker in self.kinds.get(kind, {}).get('unreadable', {}).items()}

    def record(self, kind: str, rows: int, array: np.ndarray | None,
               unreadable: Mapping[int, SkippedMedia] | None = None, now: bool = False) -> None:
        """Record ``rows`` of ``kind`` written, at most every :data:`PROGRESS_SECONDS` unless
        ``now``: ``array`` is flushed first, so that the record never runs ahead of the disk."""
        if not now and time.monotonic() - self._recorded_at < PROGRESS_SECONDS:
            self._latest[kind] = (rows, array, dict(unreadable or {}))
            return
        self._latest.pop(kind, None)
        if array is not None:
            array.flush()
        self.kinds[kind] = dict(rows=rows, width=None if array is None else array.shape[1],
                                unreadable={str(row): list(marker)
                                            for row, marker in (unreadable or {}).items()})
        atomic_write_text(self.file, json.dumps(self.kinds))
        self._recorded_at = time.monotonic()

    def record_latest(self) -> None:
        """Record now the rows written since the last record (a build stopping: Ctrl-C,
        SIGTERM), which the next build would otherwise encode again (up to
        :data:`PROGRESS_SECONDS` of them)."""
        for kind, (rows, array, unreadable) in list(self._latest.items()):
            self.record(kind, rows, array, unreadable, now=True)
