"""A feature cache folder on disk: building it (space reserved, written atomically) and reading
it back."""
from __future__ import annotations

import errno
import glob
import io
import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mmengine.logging import print_log
from torch.utils.data import DataLoader, Dataset

from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.engine.feature_cache.key import (
    ItemIndex,
    index_items,
    media_decoding,
)
from xmr.engine.feature_cache.progress import (
    BUILD_RECORD,
    PROGRESS_RECORD,
    RankProgress,
    build_record,
    records_build,
)
from xmr.engine.feature_cache.ranks import (
    FAILED_MARKER,
    BuildRanks,
    BuildStep,
    OtherRankFailed,
    RankStoppedError,
    rank_rows,
)
from xmr.engine.worker_signals import WORKER_IGNORED_SIGNALS, ignore_in_workers
from xmr.fileio import (
    OTHER_HOST_QUIET_SECONDS,
    atomic_write_text,
    fsync_folder,
    fsync_path,
    process_running,
    remove_stale_temporaries,
)
from xmr.utils.cli import UserError

#: Version of the on-disk layout; a cache of another version is refused.
CACHE_FORMAT = 1
#: The errnos of a write that found no room (:func:`_no_room`).
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class StaleFeatureCacheError(RuntimeError):
    """A feature cache does not match the model, the dataset or the preprocessing in use."""


class CorruptFeatureCacheError(StaleFeatureCacheError):
    """A file of a feature cache cannot be read or does not have the shape its meta states."""


class FeatureCache:
    """A built cache folder, opened for reading.

    Args:
        path: the cache folder (holding ``meta.json``).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        meta_file = self.path / 'meta.json'
        if not meta_file.is_file():
            raise FileNotFoundError(f'no feature cache at {self.path} (missing meta.json)')
        try:
            self.meta: dict[str, Any] = json.loads(meta_file.read_text())
        except ValueError as error:
            raise CorruptFeatureCacheError(
                f'{meta_file}: not a feature cache meta file ({error}); delete {self.path} to '
                'rebuild it') from error
        if not isinstance(self.meta, dict) or not {'key', 'counts'} <= set(self.meta):
            raise CorruptFeatureCacheError(f'{meta_file}: not a feature cache meta file (no key '
                                           f'and counts); delete {self.path} to rebuild it')
        self._arrays: dict[str, np.ndarray] = {}
        self._pid: int | None = None

    @property
    def key(self) -> dict[str, Any]:
        return self.meta['key']

    @property
    def kinds(self) -> list[str]:
        return list(self.key['features'])

    def check(self, key: dict[str, Any], details: Mapping[str, str] | None = None) -> None:
        """Refuse the cache unless it was built under exactly ``key``.

        Args:
            key: the key the cache must have.
            details: more to say of a differing field (the media files that changed).

        Raises:
            StaleFeatureCacheError: naming each differing field with both values.
        """
        built, details = self.key, details or {}
        fields = sorted(set(built) | set(key))
        differences = [f'{name}: cache has {built.get(name)!r}, now {key.get(name)!r}'
                       + (f' ({details[name]})' if name in details else '')
                       for name in fields if built.get(name) != key.get(name)]
        if differences:
            raise StaleFeatureCacheError(
                f'feature cache {self.path} is stale or belongs to another setup:\n  '
                + '\n  '.join(differences)
                + '\nRebuild it (tools/cache_features.py CONFIG --overwrite, or delete the '
                'folder to rebuild on first use), give its CachedFeatureDataset (or the '
                "phase's cache_features) rebuild_if_stale=True to rebuild it whenever it is "
                'stale, or give this setup another cache_dir.')

    def media_files(self) -> list[list[str]]:
        """Each media file's identity at the build (``[]`` for a cache built without them).

        Raises:
            CorruptFeatureCacheError: ``media_files.json`` cannot be read (cut short), naming it
                and the fix; read only once a media file changed, it is not :meth:`verify`'s.
        """
        file = self.path / 'media_files.json'
        if not file.is_file():
            return []
        try:
            return json.loads(file.read_text())
        except (OSError, ValueError) as error:
            raise CorruptFeatureCacheError(
                f'{file}: unreadable ({error}); delete {self.path} to rebuild it') from error

    def verify(self) -> None:
        """Open every array and check its length against the meta, and each item's row against
        its feature array's, naming a file that fails.

        Raises:
            CorruptFeatureCacheError: a file missing, unreadable (truncated), of the wrong
                length, or an item's row outside its feature array.
        """
        counts = self.meta['counts']
        expected = {kind: counts[kind] for kind in self.kinds}
        expected.update({f'item_{kind}{suffix}': counts['items'] for kind in self.kinds
                         for suffix in ('', '_hash')})
        for name, rows in expected.items():
            file = self.path / f'{name}.npy'
            try:
                length = len(self.array(name))
            except (OSError, ValueError) as error:
                raise CorruptFeatureCacheError(
                    f'{file}: unreadable ({error}); delete {self.path} to rebuild it') from error
            if length != rows:
                raise CorruptFeatureCacheError(
                    f'{file}: {length} rows where meta.json states {rows}; delete {self.path} '
                    'to rebuild it')
        for kind in self.kinds:
            self._verify_item_rows(kind, counts[kind])

    def _verify_item_rows(self, kind: str, rows: int) -> None:
        """Refuse an item row of ``kind`` outside ``[0, rows)`` (``-1`` too for media: not
        readable), which a read would index past the feature array with, or wrap round to
        another row."""
        item_rows, lowest = self.array(f'item_{kind}'), -1 if kind == 'media' else 0
        outside = np.flatnonzero((item_rows < lowest) | (item_rows >= rows))
        if outside.size:
            item = int(outside[0])
            raise CorruptFeatureCacheError(
                f'{self.path / f"item_{kind}.npy"}: item {item} reads row '
                f'{int(item_rows[item])} of {kind}.npy, which has {rows} rows '
                f'({outside.size} such items); delete {self.path} to rebuild it')

    def array(self, name: str) -> np.ndarray:
        """A memory-mapped array of the cache, opened once per process (DataLoader workers)."""
        if self._pid != os.getpid():
            self._arrays, self._pid = {}, os.getpid()
        if name not in self._arrays:
            self._arrays[name] = np.load(self.path / f'{name}.npy', mmap_mode='r')
        return self._arrays[name]

    def __getstate__(self) -> dict[str, Any]:
        # Memory maps are reopened in each worker rather than pickled as copies.
        return {**self.__dict__, '_arrays': {}, '_pid': None}

    @classmethod
    def build(cls, path: str | os.PathLike, dataset: Dataset, model: torch.nn.Module,
              key: dict[str, Any], batch_size: int = 64, num_workers: int = 0,
              overwrite: bool = False, index: ItemIndex | None = None,
              media_files: Sequence[tuple[str, str]] = (),
              ranks: BuildRanks | None = None) -> FeatureCache:
        """Encode every distinct source caption and media of ``dataset`` with ``model``.

        The folder is written under a temporary name, its files and itself are fsynced, and it
        is renamed when complete (the rename fsynced too), so neither an interrupted build nor
        a power cut leaves a cache that looks valid. A cache it replaces (``overwrite``) is
        renamed aside to ``<path>.replaced-<host>-<pid>`` first and removed after, so a kill
        leaves the old cache or the new one whole under ``path``; the next build removes what
        a killed one left (a folder of another host's once it has not changed for
        ``OTHER_HOST_QUIET_SECONDS``).

        A build stopped while it encodes (killed, or interrupted: ``KeyboardInterrupt``,
        ``SystemExit``) leaves its folder, where each rank has recorded the rows it wrote
        (:mod:`~xmr.engine.feature_cache.progress`, every 30 s): the next build of the same
        key, world size and batch size goes on from there, and builds the cache an
        uninterrupted build builds, bit for bit. A build that fails otherwise removes its
        folder; the next build removes those of other builds.

        Under DDP every rank calls this together (``ranks``) and encodes its own contiguous run
        of whole batches of the rows (:func:`~xmr.engine.feature_cache.ranks.rank_rows`): rank
        0 into the temporary folder's arrays, each other rank into a shard folder of its own,
        fsynced and renamed into the temporary folder when complete. Rank 0 then copies the
        shards into its arrays and renames the folder as above: the files are bit for bit a
        single process's. A failure on any rank fails every rank, naming it
        (:class:`~xmr.engine.feature_cache.ranks.RankFailedError`), and rank 0 removes the
        temporary folder; a rank interrupted or killed alone stops every rank
        (:class:`~xmr.engine.feature_cache.ranks.RankStoppedError`), and the folder is kept
        as when all are.

        Args:
            path: the cache folder to create; a symbolic link is built where it points.
            dataset: the dataset to cache (its items carry ``source_text`` / ``media_id``).
            model: the retriever whose frozen towers and data preprocessor encode.
            key: from :meth:`CachedFeatureDataset.cache_key`; ``key['features']`` says which
                kinds to compute and ``key['dtype']`` how to store them.
            batch_size: captions or media per forward pass.
            num_workers: DataLoader workers decoding the media (on each rank).
            overwrite: replace an existing cache.
            index: the dataset's :class:`ItemIndex` when the caller already read it.
            media_files: each media file's identity
                (:func:`~xmr.engine.feature_cache.key.media_files_identity`), kept to name
                the files that change later.
            ranks: the ranks building together; ``None``: this process alone.

        Raises:
            FileExistsError: ``path`` exists, is no empty folder, and ``overwrite`` is not set
                (named as a cache or as a folder holding none).
            RankFailedError: another rank failed (its error named).
        """
        # A link (work_dirs/cache -> /scratch/cache) is built where it points: its temporary
        # and replaced folders beside the target, the link kept.
        path = Path(path).resolve()
        ranks = ranks or BuildRanks(path)
        index = index or index_items(dataset, key['features'])
        started = time.perf_counter()
        record = build_record(key, ranks.world, batch_size)
        with ranks.step('making the build folder') as step:
            step.result = _start_build(path, overwrite, record) if ranks.rank == 0 else None
        partial = step.results[0]
        try:
            with ranks.step('encoding its rows', markers=partial) as encoded:
                encoded.result = _encode_rows(partial, dataset, model, key, index, batch_size,
                                              num_workers, ranks, encoded)
            with ranks.step('assembling the cache'):
                if ranks.rank == 0:
                    _finish_build(partial, path, len(dataset), key, index, encoded.results,
                                  batch_size, media_files, started)
        except BaseException as error:
            if ranks.rank == 0:
                _end_unfinished_build(error, path, partial, record)
            raise
        return cls(path)


def _end_unfinished_build(error: BaseException, path: Path, partial: Path,
                          record: dict[str, Any]) -> None:
    """Rank 0's part when a build ends in ``error``. A stop (an interruption, or another
    rank's interruption or kill: :class:`~xmr.engine.feature_cache.ranks.RankStoppedError`)
    keeps the build folder for the next build; a failure removes it, unless it ran out of room
    while the folder records its build, which is kept and named.

    Raises:
        UserError: no room to write the cache (the disk, a quota), naming the folder kept.
    """
    goes_on = ('the next build of this cache (the same data, model, ranks and batch size) '
               'goes on from them')
    if not isinstance(error, Exception) or isinstance(error, RankStoppedError):
        if partial.is_dir():  # else it was renamed: a peer stopped after the cache was made
            print_log(f'{path}: stopped; the rows encoded so far are kept in {partial.name}, '
                      f'and {goes_on}', logger='current', level=logging.WARNING)
        return
    # Kept only while it records its build: else the next build would remove it.
    kept = _no_room(error) and records_build(partial, record)
    if not kept:
        shutil.rmtree(partial, ignore_errors=True)
    if _no_room(error):
        raise UserError(partial if kept else path, f'no room to write the feature cache ({error})',
                        'free space, or set cache_dir (or --work-dir) on a larger disk'
                        + (f'; the rows encoded so far are kept here, and {goes_on}'
                           if kept else '')) from error


def refuse_other_folder(path: str | os.PathLike, where: str = 'cache_dir') -> None:
    """Refuse a cache folder that holds something other than a feature cache (no
    ``meta.json``): a build, a rebuild (``overwrite``) too, replaces what it holds, and a
    ``cache_dir`` naming the data's own folder lost its annotation and images. A folder made
    ahead for the cache, empty, passes, as does one not made yet. Cheap: a tool checks it
    before it builds the model (``tools/cache_features.py``).

    Args:
        path: the cache folder.
        where: where it was given, for the message.

    Raises:
        FileExistsError: naming the folder, where it was given and the fix.
    """
    path = Path(path)
    if path.exists() and not _empty_folder(path) and not (path / 'meta.json').is_file():
        raise FileExistsError(f'{path} exists and holds no feature cache (no meta.json): give '
                              f'the cache a new or empty folder ({where})')


def _empty_folder(path: Path) -> bool:
    """A folder made ahead for the cache, empty: it holds nothing a build would replace."""
    return path.is_dir() and not any(path.iterdir())


def _start_build(path: Path, overwrite: bool, record: dict[str, Any]) -> Path:
    """The build's temporary folder ``<path>.partial-<host>-<pid>``: the folder of a stopped
    build that ``record`` describes too, renamed, or a new one.

    Raises:
        FileExistsError: as :meth:`FeatureCache.build`.
    """
    refuse_other_folder(path)
    if path.exists() and not _empty_folder(path) and not overwrite:
        raise FileExistsError(f'feature cache {path} exists; pass overwrite=True to rebuild')
    partial = _own_folder(path, 'partial')
    stopped = next((left for left in _stopped_builds(path) if records_build(left, record)), None)
    remove_abandoned_builds(path, keep=stopped)
    if stopped is not None:
        print_log(f'{path}: going on with the rows a stopped build encoded ({stopped.name})',
                  logger='current')
        if stopped != partial:
            stopped.rename(partial)
        remove_stale_temporaries(partial)  # the stopped build's writes under way (progress)
        # A rank that failed while the others were stopped left its marker, which this build's
        # ranks would take for a failure of their own.
        for marker in partial.glob(f'{FAILED_MARKER}*'):
            marker.unlink()
        return partial
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    atomic_write_text(partial / BUILD_RECORD, json.dumps(record))
    return partial


def _shard_folder(partial: Path, rank: int) -> Path:
    """Where ``rank`` (not 0) leaves the rows it encoded, once complete."""
    return partial / f'shard-{rank}'


def _encode_rows(partial: Path, dataset: Dataset, model: torch.nn.Module, key: dict[str, Any],
                 index: ItemIndex, batch_size: int, num_workers: int, ranks: BuildRanks,
                 step: BuildStep) -> tuple[dict[int, SkippedMedia], dict[str, int]]:
    """Encode this rank's rows of each kind, into ``partial`` (rank 0) or its shard folder.

    Returns:
        The rows whose media could not be read, with the dataset's markers, and the width of
        each feature array this rank wrote (none for a kind of which it encoded nothing).
    """
    kinds, first_item = list(key['features']), index.first_item
    folder = partial if ranks.rank == 0 else partial / f'shard-{ranks.rank}.partial'
    # A rank of a stopped build may have ended its rows (and renamed its folder) before.
    done = ranks.rank > 0 and _shard_folder(partial, ranks.rank).is_dir()
    folder = _shard_folder(partial, ranks.rank) if done else folder
    folder.mkdir(exist_ok=True)
    progress = RankProgress(folder)
    widths, unreadable = {}, {}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if 'source' in kinds:
                texts = list(first_item['source'])
                out = _RankRows(folder, 'source', len(texts), key['dtype'], ranks, batch_size)
                widths['source'] = _encode_sources(out, model, texts[out.rows.start:
                                                                    out.rows.stop], step,
                                                   progress)
            if 'media' in kinds:
                items = list(first_item['media'].values())
                out = _RankRows(folder, 'media', len(items), key['dtype'], ranks, batch_size)
                widths['media'], unreadable = _encode_media(
                    out, dataset, model, items[out.rows.start:out.rows.stop], num_workers, step,
                    progress)
    except BaseException as stop:
        # A stop (Ctrl-C, SIGTERM, exit; another rank's stop, or failure), not a failure of
        # this rank's: a stopped build is kept, and the next goes on from the rows recorded.
        if not isinstance(stop, Exception) or isinstance(stop, OtherRankFailed):
            progress.record_latest()
        raise
    finally:
        model.train(was_training)
    if ranks.rank > 0 and not done:
        fsync_folder(folder)
        folder.rename(_shard_folder(partial, ranks.rank))
    return unreadable, {kind: width for kind, width in widths.items() if width is not None}


def _finish_build(partial: Path, path: Path, items: int, key: dict[str, Any], index: ItemIndex,
                  encoded: list[tuple[dict[int, SkippedMedia], dict[str, int]]],
                  batch_size: int, media_files: Sequence[tuple[str, str]],
                  started: float) -> None:
    """Copy the other ranks' shards into ``partial``'s arrays, write the item arrays and the
    meta, and rename ``partial`` to ``path`` once all of it is on disk."""
    kinds, rows, first_item = list(key['features']), index.rows, index.first_item
    for rank in range(1, len(encoded)):
        if not _shard_folder(partial, rank).is_dir():
            raise FileNotFoundError(
                f'{_shard_folder(partial, rank)}: the rows rank {rank} encoded are not there; '
                'every rank must see the cache folder\'s parent (a file system they share)')
    counts = {kind: len(first_item[kind]) for kind in kinds}
    for kind in kinds:
        _assemble(partial, kind, counts[kind], [widths.get(kind) for _, widths in encoded],
                  key['dtype'], batch_size)
    meta: dict[str, Any] = dict(key=key)
    if 'media' in kinds:
        if not any('media' in widths for _, widths in encoded):
            raise ValueError('no media of the dataset could be read; nothing to cache')
        skipped = {row: marker for shard, _ in encoded for row, marker in shard.items()}
        counts['unreadable_media'] = len(skipped)
        rows['media'][np.isin(rows['media'], list(skipped))] = -1
        media_ids = list(first_item['media'])
        meta['unreadable_media'] = {media_ids[row]: dict(media_path=marker.media_path,
                                                         reason=marker.reason)
                                    for row, marker in sorted(skipped.items())}
    for kind in kinds:
        _save_array(partial / f'item_{kind}.npy', rows[kind])
        _save_array(partial / f'item_{kind}_hash.npy', index.hashes[kind])
    meta.update(counts=dict(items=items, **counts),
                seconds=round(time.perf_counter() - started, 1))
    (partial / 'meta.json').write_text(json.dumps(meta, indent=2, sort_keys=True))
    if media_files:
        (partial / 'media_files.json').write_text(json.dumps(list(media_files)))
    # Without it, a power cut after the rename can leave arrays of the right length
    # but zeros (their pages never written), which verify() cannot tell from features.
    fsync_folder(partial)
    replaced = _install(partial, path)
    # Only now: until the rename, a build stopped or failing (no room) goes on from the
    # records and the shards; removed before the fsync, a stop there lost every row encoded.
    for rank in range(1, len(encoded)):
        shutil.rmtree(_shard_folder(path, rank))
    for record in (BUILD_RECORD, PROGRESS_RECORD):
        (path / record).unlink(missing_ok=True)
    shutil.rmtree(replaced, ignore_errors=True)


def _install(partial: Path, path: Path, attempts: int = 3) -> Path:
    """Rename the finished ``partial`` to ``path``, the cache there renamed aside first; return
    where it went (``<path>.replaced-<host>-<pid>``, to remove).

    The cache replaced is renamed aside, not removed in place: a kill while removing it (a
    multi-GB array's unlink) left it half deleted under its name and the new one abandoned.
    Another process building the same cache (a sweep's jobs sharing a ``cache_dir``) may
    install its own between the two renames: it is renamed aside in turn, where the rename
    onto it failed (``ENOTEMPTY``) and this build, finished, removed its folder.
    """
    replaced = _own_folder(path, 'replaced')
    for attempt in range(attempts):
        try:
            if path.exists():
                path.rename(replaced)
        except FileNotFoundError:  # another process's moved aside meanwhile
            pass
        try:
            partial.rename(path)
            break
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST) or attempt == attempts - 1:
                raise
            # The cache renamed aside before is the older one: removed now, to take the other's.
            shutil.rmtree(replaced, ignore_errors=True)
    fsync_path(path.parent)
    return replaced


def _save_array(file: Path, array: np.ndarray) -> None:
    """``np.save`` through Python's own write: numpy's write of a file tells a full disk as
    'N requested and M written', without its errno."""
    buffer = io.BytesIO()
    np.save(buffer, array)
    file.write_bytes(buffer.getbuffer())


def _no_room(error: BaseException) -> bool:
    """A write that found no room: a full disk, a quota, or a file over the file system's
    (FAT's 4 GB) or ``ulimit -f``'s limit."""
    return isinstance(error, OSError) and error.errno in _NO_ROOM


def _assemble(partial: Path, name: str, total: int, widths: list[int | None], dtype: str,
              batch_size: int) -> None:
    """Copy the rows of ``name`` the other ranks encoded into rank 0's ``[total, E]`` array.

    Args:
        widths: ``[world]``: the width of each rank's array, ``None`` where the rank wrote none
            (no rows, or only unreadable media: those rows stay zeros, as in one process).
    """
    written = [width for width in widths if width is not None]
    if not written:
        return
    world = len(widths)
    out = (np.load(partial / f'{name}.npy', mmap_mode='r+') if widths[0] is not None
           else _open_rows(partial, name, total, written[0], dtype))
    for rank in range(1, world):
        if widths[rank] is not None:
            rows = rank_rows(total, batch_size, rank, world)
            out[rows.start:rows.stop] = np.load(
                _shard_folder(partial, rank) / f'{name}.npy', mmap_mode='r')
    out.flush()


def remove_abandoned_builds(path: Path, keep: Path | None = None) -> None:
    """Delete the ``<path>.partial-<host>-<pid>`` folders of builds and the
    ``<path>.replaced-<host>-<pid>`` caches they replaced whose process is gone (killed), but
    ``keep``."""
    for left in [*_builds_of(path, 'partial'), *_builds_of(path, 'replaced')]:
        if left.folder != keep and not left.own and not left.writer_running():
            shutil.rmtree(left.folder, ignore_errors=True)


def _stopped_builds(path: Path) -> list[Path]:
    """The build folders of ``path`` that no running build writes: a killed process's, or
    this process's own, left by an interruption."""
    return sorted(left.folder for left in _builds_of(path, 'partial')
                  if left.own or not left.writer_running())


def _own_folder(path: Path, state: str) -> Path:
    """``<path>.<state>-<host>-<pid>``, the folder of this process: its build (``'partial'``)
    or the cache it replaces (``'replaced'``)."""
    return path.with_name(f'{path.name}.{state}-{socket.gethostname()}-{os.getpid()}')


class _BuildFolder:
    """A ``<cache>.<state>-<host>-<pid>`` folder and the process it is named by (no host in
    the names of an xmr before 2026-12: this host's)."""

    def __init__(self, folder: Path, host: str, pid: int) -> None:
        self.folder, self.host, self.pid = folder, host or socket.gethostname(), pid

    @property
    def own(self) -> bool:
        return self.host == socket.gethostname() and self.pid == os.getpid()

    def writer_running(self) -> bool:
        """Whether its process runs: asked of this host's system, or for another host's,
        whether the folder changed within ``OTHER_HOST_QUIET_SECONDS`` (two jobs of a sweep on
        two nodes building one cache each went on with, or removed, the other's folder)."""
        if self.host == socket.gethostname():
            return process_running(self.pid)
        try:
            written = max(entry.stat().st_mtime for entry in [self.folder,
                                                               *self.folder.rglob('*')])
        except FileNotFoundError:  # renamed or removed meanwhile: by a running build
            return True
        return time.time() - written < OTHER_HOST_QUIET_SECONDS


def _builds_of(path: Path, state: str) -> list[_BuildFolder]:
    """The ``<path>.<state>-<host>-<pid>`` folders beside ``path``."""
    prefix = f'{path.name}.{state}-'
    found = []
    # Unescaped, a cache named 'feat[1]' was a pattern: it matched the folders of 'feat1'
    # and missed its own.
    for folder in path.parent.glob(f'{glob.escape(prefix)}*'):
        host, _, pid = folder.name[len(prefix):].rpartition('-')
        if pid.isdigit():
            found.append(_BuildFolder(folder, host, int(pid)))
    return found


def _open_rows(folder: Path, name: str, rows: int, width: int, dtype: str) -> np.ndarray:
    """A writable ``[rows, width]`` memory map whose disk blocks are reserved up front.

    Writing to a memory map on a full disk kills the process with SIGBUS; reserving the
    blocks first turns that into an error raised here.

    Raises:
        UserError: no room for the file (names the folder, the bytes needed and those free).
    """
    file = folder / f'{name}.npy'
    array = np.lib.format.open_memmap(file, mode='w+', dtype=dtype, shape=(rows, width))
    _reserve(file, file.stat().st_size)
    return array


def _reserve(file: Path, size: int) -> None:
    """Allocate ``size`` bytes of ``file`` on disk, or check the free space where the file
    system (or platform) cannot allocate ahead."""
    allocate = getattr(os, 'posix_fallocate', None)
    try:
        if allocate is not None:
            with open(file, 'r+b') as handle:
                allocate(handle.fileno(), 0, size)
            return
    except OSError as error:
        if _no_room(error):
            _raise_no_space(file, size, '' if error.errno == errno.ENOSPC
                            else f' ({error.strerror})')
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
    if shutil.disk_usage(file.parent).free < size:
        _raise_no_space(file, size)


def _raise_no_space(file: Path, size: int, reason: str = '') -> None:
    free = shutil.disk_usage(file.parent).free
    raise UserError(file.parent, f'no space for the feature cache{reason}: {file.name} needs '
                    f'{size:,} bytes, {free:,} are free',
                    'free space, or set cache_dir (or --work-dir) on a larger disk')


class _RankRows:
    """This rank's rows of a ``[total, E]`` feature array ``name`` and the file it writes them
    to: rank 0 the array itself (its rows come first), another rank a ``[rows, E]`` shard.

    Args:
        folder: the build folder (rank 0) or the rank's shard folder.
        name: the array, ``'source'`` or ``'media'``.
        total: the array's rows on all ranks.
        dtype: the storage dtype.
        ranks: the ranks building (this one's rows are :func:`rank_rows`).
        batch_size: rows per forward pass.
    """

    def __init__(self, folder: Path, name: str, total: int, dtype: str, ranks: BuildRanks,
                 batch_size: int) -> None:
        self.folder, self.name, self.dtype, self.batch_size = folder, name, dtype, batch_size
        self.rows = rank_rows(total, batch_size, ranks.rank, ranks.world)
        self.file_rows = total if ranks.rank == 0 else len(self.rows)

    def open(self, width: int) -> np.ndarray:
        """The file as a writable ``[file rows, width]`` map; row ``i`` of this rank's rows is
        its row ``i``."""
        return _open_rows(self.folder, self.name, self.file_rows, width, self.dtype)

    def reopen(self, progress: RankProgress) -> np.ndarray | None:
        """The file a stopped build wrote rows to, as a writable map (``None``: none)."""
        if progress.width(self.name) is None:
            return None
        return np.load(self.folder / f'{self.name}.npy', mmap_mode='r+')


def _encode_sources(out: _RankRows, model: torch.nn.Module, texts: list[str],
                    step: BuildStep, progress: RankProgress) -> int | None:
    """Write ``r^S`` of this rank's ``texts`` from the first not written yet; return the width
    (``None``: no texts)."""
    array = out.reopen(progress)
    for start in range(progress.rows_done('source'), len(texts), out.batch_size):
        step.stop_if_another_failed()
        batch = model.data_preprocessor(dict(source_text=texts[start:start + out.batch_size]))
        features = model.encode_source(batch['source_tokens']).float().cpu().numpy()
        if array is None:
            array = out.open(features.shape[1])
        array[start:start + len(features)] = features
        progress.record('source', start + len(features), array)
    progress.record('source', len(texts), array, now=True)
    return None if array is None else array.shape[1]


class _RowMedia(Dataset):
    """``(row, media)`` of the first item of each distinct media; ``media`` is the dataset's
    :class:`SkippedMedia` marker when the file could not be read (``on_corrupt='skip'``)."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, row: int) -> tuple[int, torch.Tensor | SkippedMedia]:
        index = self.indices[row]
        item = self.dataset[index]
        if item is None:  # a dataset's own skip, without a marker
            return row, SkippedMedia(index=index, media_path='', reason='the dataset gave no item')
        if isinstance(item, SkippedMedia):
            return row, item
        return row, item['media']


def _collate_row_media(pairs: Sequence[tuple[int, torch.Tensor | SkippedMedia]]
                       ) -> tuple[list[int], torch.Tensor | None, dict[int, SkippedMedia]]:
    kept = [(row, media) for row, media in pairs if isinstance(media, torch.Tensor)]
    skipped = {row: media for row, media in pairs if isinstance(media, SkippedMedia)}
    if not kept:
        return [], None, skipped
    return [row for row, _ in kept], torch.stack([media for _, media in kept]), skipped


def _encode_media(out: _RankRows, dataset: Dataset, model: torch.nn.Module,
                  indices: list[int], num_workers: int, step: BuildStep,
                  progress: RankProgress) -> tuple[int | None, dict[int, SkippedMedia]]:
    """Write ``r^V`` of the media of this rank's items ``indices`` (one per media row), from
    the first not written yet.

    Returns:
        The width (``None``: no media of these rows could be read) and the rows whose media
        could not be read, with the markers the dataset gave them (file and reason).
    """
    done = progress.rows_done('media')
    # Whole batches were written: the batches from there are those of an uninterrupted build.
    loader = DataLoader(_RowMedia(dataset, indices[done:]), batch_size=out.batch_size,
                        num_workers=num_workers, collate_fn=_collate_row_media)
    ignore_in_workers(loader, WORKER_IGNORED_SIGNALS)
    unreadable = progress.unreadable('media')
    array = out.reopen(progress)
    with media_decoding(dataset, True):
        for number, (rows, media, skipped) in enumerate(loader):
            step.stop_if_another_failed()
            unreadable.update({out.rows.start + done + row: marker
                               for row, marker in skipped.items()})
            if media is not None:
                data = model.data_preprocessor(dict(media=media))
                features = model.encode_media(data['media']).float().cpu().numpy()
                if array is None:
                    array = out.open(features.shape[1])
                array[[done + row for row in rows]] = features
            written = min(done + (number + 1) * out.batch_size, len(indices))
            progress.record('media', written, array, unreadable)
    progress.record('media', len(indices), array, unreadable, now=True)
    return None if array is None else array.shape[1], unreadable
