"""A feature cache build stopped while it encodes goes on from the rows it recorded, into the
cache an uninterrupted build writes, byte for byte; a stopped build of another key or batch
size is not taken, and a build that fails otherwise leaves nothing."""
from __future__ import annotations

import errno
import json
import multiprocessing
import os
import shutil
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.engine.feature_cache.test_ranks import (
    cached_pairs,
    counting_media,
    five_images_ann,
    join_group,
    one_process_build,
    wait_for,
)
from tests.engine.test_distributed import free_port
from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.engine.feature_cache import progress, store
from xmr.utils.cli import UserError


@pytest.fixture(autouse=True)
def record_every_batch(monkeypatch):
    monkeypatch.setattr('xmr.engine.feature_cache.progress.PROGRESS_SECONDS', 0)


def stop_at(monkeypatch, model, calls: int, error: BaseException | type[BaseException]) -> list:
    """Count the media batches ``model`` encodes; raise ``error`` at batch ``calls``."""
    encoded, encode = [], model.encode_media

    def counted(media):
        if len(encoded) == calls:
            raise error
        encoded.append(len(media))
        return encode(media)

    monkeypatch.setattr(model, 'encode_media', counted)
    return encoded


def cache_files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())
            if path.name != 'meta.json'}


def build(ann_file: Path, folder: Path, model, batch_size: int = 2) -> None:
    """The media decoded in a worker (which warns of grey there)."""
    cached_pairs(ann_file, folder, batch_size).prepare(model)


@pytest.mark.parametrize('record_seconds', [0, 3600])
@pytest.mark.parametrize('error', [KeyboardInterrupt, SystemExit])
def test_a_stopped_build_goes_on_from_the_rows_it_recorded_and_builds_the_same_cache(
        tiny_retriever, tmp_path, monkeypatch, error, record_seconds):
    """Its rows recorded at every batch, or (an hour between records) as it stops alone: a
    build recorded every 30 s alone, and the next build encoded up to 30 s of rows again."""
    monkeypatch.setattr('xmr.engine.feature_cache.progress.PROGRESS_SECONDS', record_seconds)
    ann_file = five_images_ann(tmp_path)
    build(ann_file, tmp_path / 'whole', tiny_retriever)
    said = []
    with monkeypatch.context() as patch:
        stop_at(patch, tiny_retriever, 2, error)
        patch.setattr(store, 'print_log', lambda message, **_: said.append(message))
        with pytest.raises(error):
            build(ann_file, tmp_path / 'cache', tiny_retriever)
    [partial] = tmp_path.glob('cache.partial-*')
    assert said[-1] == (f"{tmp_path / 'cache'}: stopped; the rows encoded so far are kept in "
                        f'{partial.name}, and the next build of this cache (the same data, '
                        'model, ranks and batch size) goes on from them')
    progress = json.loads((partial / 'progress.json').read_text())
    # Five media in batches of 2: the second holds grey, unreadable; the third stopped.
    assert progress['source']['rows'] == 10 and progress['media']['rows'] == 4
    assert list(progress['media']['unreadable']) == ['3']
    # Left by a process gone since: the next build takes it over, without the temporary of
    # the write it was killed in (it ended up in the finished cache).
    (partial / '.progress.json.999999999.tmp').write_text('{"cut')
    partial.rename(tmp_path / 'cache.partial-999999999')

    encoded = stop_at(monkeypatch, tiny_retriever, -1, error)
    build(ann_file, tmp_path / 'cache', tiny_retriever)
    assert encoded == [1]  # white alone: the rows not recorded
    assert cache_files(tmp_path / 'cache') == cache_files(tmp_path / 'whole')
    meta = json.loads((tmp_path / 'cache' / 'meta.json').read_text())
    assert list(meta['unreadable_media']) == ['grey'] and meta['counts']['media'] == 5
    assert not list(tmp_path.glob('*.partial-*'))


def test_a_build_stopped_in_the_source_rows_goes_on_from_those_it_recorded(
        tiny_retriever, tmp_path, monkeypatch):
    """The ``r^S`` rows come first (every caption of the source language: 119,547 for the
    paper's table): a stop among them encoded them again from the first."""
    ann_file = five_images_ann(tmp_path)
    build(ann_file, tmp_path / 'whole', tiny_retriever)
    sources, encode_source, stop = [], tiny_retriever.encode_source, True

    def counted(tokens):
        if len(sources) == 3 and stop:
            raise KeyboardInterrupt
        features = encode_source(tokens)
        sources.append(len(features))
        return features

    monkeypatch.setattr(tiny_retriever, 'encode_source', counted)
    with pytest.raises(KeyboardInterrupt):
        build(ann_file, tmp_path / 'cache', tiny_retriever)
    [partial] = tmp_path.glob('cache.partial-*')
    progress = json.loads((partial / 'progress.json').read_text())
    assert progress['source']['rows'] == 6 and 'media' not in progress

    sources.clear()
    stop = False
    encoded = stop_at(monkeypatch, tiny_retriever, -1, KeyboardInterrupt)
    build(ann_file, tmp_path / 'cache', tiny_retriever)
    assert sources == [2, 2]  # ten captions in batches of 2: the fourth and the fifth
    assert encoded == [2, 1, 1]
    assert cache_files(tmp_path / 'cache') == cache_files(tmp_path / 'whole')
    assert not list(tmp_path.glob('*.partial-*'))


@pytest.mark.parametrize('code', [errno.ENOSPC, errno.EDQUOT, errno.EFBIG])
def test_a_build_that_finds_no_room_as_it_finishes_keeps_its_rows_for_the_next(
        tiny_retriever, tmp_path, monkeypatch, code):
    """The arrays of item rows and the meta are written once every row is encoded (hours on
    CC3M): a full disk then removed the build folder with all of it, naming no folder."""
    ann_file = five_images_ann(tmp_path)
    build(ann_file, tmp_path / 'whole', tiny_retriever)
    write_bytes = Path.write_bytes

    def full(path, data):
        if path.name == 'item_media.npy':
            raise OSError(code, os.strerror(code))
        return write_bytes(path, data)

    with monkeypatch.context() as patch:
        patch.setattr(Path, 'write_bytes', full)
        with pytest.raises(UserError, match=r'cache\.partial-[\w.-]+-\d+: no room to write the '
                           rf'feature cache \(\[Errno {code}\] .*the rows encoded so far are '
                           'kept here'):
            build(ann_file, tmp_path / 'cache', tiny_retriever)
    assert len(list(tmp_path.glob('cache.partial-*'))) == 1
    encoded = stop_at(monkeypatch, tiny_retriever, -1, KeyboardInterrupt)
    build(ann_file, tmp_path / 'cache', tiny_retriever)
    assert encoded == []
    assert cache_files(tmp_path / 'cache') == cache_files(tmp_path / 'whole')
    assert not list(tmp_path.glob('*.partial-*'))


def test_a_stopped_build_of_another_batch_size_is_removed_and_a_failed_one_leaves_nothing(
        tiny_retriever, tmp_path, monkeypatch):
    ann_file = five_images_ann(tmp_path)
    with monkeypatch.context() as patch:
        stop_at(patch, tiny_retriever, 2, KeyboardInterrupt)
        with pytest.raises(KeyboardInterrupt):
            build(ann_file, tmp_path / 'cache', tiny_retriever)
    assert len(list(tmp_path.glob('cache.partial-*'))) == 1
    # Batches of another size are other forward passes: their rows are not taken.
    encoded = stop_at(monkeypatch, tiny_retriever, 1, RuntimeError('a bug'))
    with pytest.raises(RuntimeError, match='a bug'):
        build(ann_file, tmp_path / 'cache', tiny_retriever, batch_size=4)
    assert encoded == [3]  # from the first batch, grey among it
    assert not list(tmp_path.glob('cache*'))


def test_a_cache_named_with_glob_characters_goes_on_with_its_own_stopped_build_alone(
        tiny_retriever, tmp_path, monkeypatch):
    """'<name>.partial-*' was a glob pattern: a build of 'cache[12]' took over (or removed) the
    stopped build of 'cache1', and one of 'cache[1]' never found its own."""
    ann_file = five_images_ann(tmp_path)
    build(ann_file, tmp_path / 'whole', tiny_retriever)
    for pid, name in enumerate(('cache[1]', 'cache1'), 999999990):
        with monkeypatch.context() as patch:
            stop_at(patch, tiny_retriever, 2, KeyboardInterrupt)
            with pytest.raises(KeyboardInterrupt):
                build(ann_file, tmp_path / name, tiny_retriever)
        # Left by a process gone since.
        (tmp_path / f'{name}.partial-{socket.gethostname()}-{os.getpid()}').rename(
            tmp_path / f'{name}.partial-{pid}')

    encoded = stop_at(monkeypatch, tiny_retriever, -1, KeyboardInterrupt)
    build(ann_file, tmp_path / 'cache[12]', tiny_retriever)
    assert encoded == [2, 1, 1]  # every batch, grey unreadable in the second
    encoded.clear()
    build(ann_file, tmp_path / 'cache[1]', tiny_retriever)
    assert encoded == [1]  # white alone: the rows not recorded
    assert cache_files(tmp_path / 'cache[1]') == cache_files(tmp_path / 'whole')
    assert sorted(path.name for path in tmp_path.glob('cache*')) == [
        'cache1.partial-999999991', 'cache[12]', 'cache[1]']


def test_another_host_s_build_is_left_alone_while_it_changes_and_taken_over_once_quiet(
        tiny_retriever, tmp_path, monkeypatch):
    """Its pid was asked of this host's system: two jobs of a sweep on two nodes, building one
    cache, took over or removed the other's running build."""
    ann_file = five_images_ann(tmp_path)
    build(ann_file, tmp_path / 'whole', tiny_retriever)
    with monkeypatch.context() as patch:
        stop_at(patch, tiny_retriever, 2, KeyboardInterrupt)
        with pytest.raises(KeyboardInterrupt):
            build(ann_file, tmp_path / 'cache', tiny_retriever)
    [own] = tmp_path.glob('cache.partial-*')
    assert own.name == f'cache.partial-{socket.gethostname()}-{os.getpid()}'
    # Its pid names no process here, where it was taken for a killed build's.
    other = own.rename(tmp_path / 'cache.partial-node-07-999999999')
    with monkeypatch.context() as patch:
        encoded = stop_at(patch, tiny_retriever, -1, KeyboardInterrupt)
        build(ann_file, tmp_path / 'cache', tiny_retriever)
    assert encoded == [2, 1, 1]  # every batch: the running build's rows are its own
    assert other.is_dir() and cache_files(tmp_path / 'cache') == cache_files(tmp_path / 'whole')

    shutil.rmtree(tmp_path / 'cache')
    quiet = time.time() - store.OTHER_HOST_QUIET_SECONDS - 1
    for path in [other, *other.rglob('*')]:
        os.utime(path, (quiet, quiet))
    encoded = stop_at(monkeypatch, tiny_retriever, -1, KeyboardInterrupt)
    build(ann_file, tmp_path / 'cache', tiny_retriever)
    assert encoded == [1]  # white alone: the rows the stopped build recorded are taken
    assert cache_files(tmp_path / 'cache') == cache_files(tmp_path / 'whole')
    assert not list(tmp_path.glob('*.partial-*'))


def _stopped_rank(rank: int, port: int, model: torch.nn.Module, ann_file: str, out_dir: str,
                  stop: str | None) -> None:
    """Rank of a build whose job is stopped (``'killed'`` outright, as a scheduler's SIGKILL
    reaching every rank, or ``'interrupted'``, as Ctrl-C): rank 1 at its second media batch,
    then rank 0 at its first (killed in that order, so that neither sees the other gone and
    fails instead); without ``stop`` builds and records its batches."""
    from xmr.engine.feature_cache import progress

    progress.PROGRESS_SECONDS = 0
    join_group(rank, port)
    encoded: list[int] = []
    counting_media(model, encoded)
    count = model.encode_media
    waiting, gone = Path(out_dir, 'rank0-waiting'), Path(out_dir, 'rank1-gone')

    def stopped_at_its_batch(media: torch.Tensor) -> torch.Tensor:
        if stop and len(encoded) == rank:
            (waiting if rank == 0 else gone).touch()
            wait_for((gone if rank == 0 else waiting).is_file)
            if stop == 'killed':
                os._exit(9)
            raise KeyboardInterrupt
        return count(media)

    model.encode_media = stopped_at_its_batch
    try:
        cached_pairs(Path(ann_file), Path(out_dir, 'cache')).prepare(model)
    except KeyboardInterrupt:
        encoded = 'interrupted'
    Path(out_dir, f'rank{rank}').write_text(json.dumps(encoded), encoding='utf-8')
    torch.distributed.destroy_process_group()


@pytest.mark.parametrize('stop, exitcode', [('killed', 9), ('interrupted', 0)])
def test_two_ranks_killed_or_interrupted_go_on_with_the_rows_they_recorded(
        tiny_retriever, tmp_path, stop, exitcode):
    """Rank 0's share (one batch) is not begun, rank 1's first of two batches is recorded.
    Interrupted, each rank left a failure marker in the folder kept: the next build took it for
    a failure of its own ranks, stopped, and rank 0 removed the rows recorded."""
    ann_file = five_images_ann(tmp_path)
    context = multiprocessing.get_context('fork')
    port = free_port()
    processes = [context.Process(target=_stopped_rank, args=(
        rank, port, tiny_retriever, str(ann_file), str(tmp_path), stop)) for rank in (0, 1)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [process.exitcode for process in processes] == [exitcode, exitcode]
    [partial] = tmp_path.glob('cache.partial-*')
    assert json.loads((partial / 'shard-1.partial' / 'progress.json').read_text())['media'][
        'rows'] == 2
    assert not list(partial.glob('failed-rank-*'))
    # As a rank that failed while the others were interrupted leaves it.
    (partial / 'failed-rank-1').write_text('ValueError: a bug')

    torch.multiprocessing.start_processes(
        _stopped_rank, args=(free_port(), tiny_retriever, str(ann_file), str(tmp_path), None),
        nprocs=2, join=True, start_method='fork')
    assert [json.loads((tmp_path / f'rank{rank}').read_text()) for rank in (0, 1)] == [[2], [1]]
    one_process_build(ann_file, tmp_path / 'single', tiny_retriever)
    for name in {path.name for path in (tmp_path / 'single').iterdir()} - {'meta.json'}:
        assert (tmp_path / 'single' / name).read_bytes() == (
            tmp_path / 'cache' / name).read_bytes(), name
    assert sorted(path.name for path in (tmp_path / 'cache').iterdir()) == sorted(
        path.name for path in (tmp_path / 'single').iterdir())
    assert not list(tmp_path.glob('*.partial-*'))


def _rank_finding_no_room(rank: int, port: int, model: torch.nn.Module, ann_file: str,
                          out_dir: str, full: bool) -> None:
    """Rank of a build whose rank 0 finds the disk full as it writes the item arrays."""
    join_group(rank, port)
    encoded: list[int] = []
    counting_media(model, encoded)
    if full and rank == 0:
        write_bytes = Path.write_bytes

        def no_room(path: Path, data) -> int:
            if path.name == 'item_media.npy':
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return write_bytes(path, data)

        Path.write_bytes = no_room  # in this forked process alone
    try:
        cached_pairs(Path(ann_file), Path(out_dir, 'cache')).prepare(model)
        outcome: list[int] | str = encoded
    except Exception as error:  # noqa: BLE001 - the outcome is what the test reads
        outcome = type(error).__name__
    Path(out_dir, f'rank{rank}').write_text(json.dumps(outcome), encoding='utf-8')
    torch.distributed.destroy_process_group()


def test_two_ranks_that_find_no_room_as_they_finish_keep_every_ranks_rows(tiny_retriever,
                                                                          tmp_path):
    """The other ranks' shards were removed once copied, before the item arrays were written:
    the build kept after a full disk had lost their records, and they encoded their rows again."""
    ann_file = five_images_ann(tmp_path)
    outcomes = []
    for full in (True, False):
        torch.multiprocessing.start_processes(
            _rank_finding_no_room, args=(free_port(), tiny_retriever, str(ann_file),
                                         str(tmp_path), full),
            nprocs=2, join=True, start_method='fork')
        outcomes.append([json.loads((tmp_path / f'rank{rank}').read_text()) for rank in (0, 1)])
    assert outcomes[0][0] == 'UserError'
    assert outcomes[1] == [[], []]
    one_process_build(ann_file, tmp_path / 'single', tiny_retriever)
    assert cache_files(tmp_path / 'cache') == cache_files(tmp_path / 'single')


def test_no_room_at_the_last_fsync_keeps_the_build_for_the_next(tiny_retriever, tmp_path,
                                                                 monkeypatch):
    """A quota reported at the last fsync (NFS, Lustre): the folder still records its build
    (the records go once it is renamed), so it is kept, named, and the next build encodes
    nothing again."""
    def quota(folder: Path) -> None:
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    ann_file = five_images_ann(tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(store, 'fsync_folder', quota)
        with pytest.raises(UserError) as error:
            build(ann_file, tmp_path / 'cache', tiny_retriever)
    [partial] = tmp_path.glob('cache.partial-*')
    assert error.value.where == str(partial)
    assert 'Disk quota exceeded' in error.value.problem
    assert 'larger disk' in error.value.fix and 'kept here' in error.value.fix
    encoded = stop_at(monkeypatch, tiny_retriever, -1, KeyboardInterrupt)
    build(ann_file, tmp_path / 'cache', tiny_retriever)
    assert encoded == [] and not list(tmp_path.glob('cache.partial-*'))


def test_a_build_stopped_as_it_renames_its_finished_folder_goes_on_encoding_nothing(
        tiny_retriever, tmp_path, monkeypatch):
    """Stopped once every row was encoded, as it fsyncs the folder before the rename (a
    multi-GB cache's arrays): its records were removed already, so the next build took the
    folder for another build's and removed it, every row to encode again."""
    ann_file = five_images_ann(tmp_path)
    build(ann_file, tmp_path / 'whole', tiny_retriever)
    with monkeypatch.context() as patch:
        def stopped(folder):
            raise KeyboardInterrupt
        patch.setattr(store, 'fsync_folder', stopped)
        with pytest.raises(KeyboardInterrupt):
            build(ann_file, tmp_path / 'cache', tiny_retriever)
    assert not (tmp_path / 'cache').exists()
    encoded = stop_at(monkeypatch, tiny_retriever, -1, KeyboardInterrupt)
    build(ann_file, tmp_path / 'cache', tiny_retriever)
    assert encoded == []
    assert cache_files(tmp_path / 'cache') == cache_files(tmp_path / 'whole')
    assert not list(tmp_path.glob('*.partial-*'))


class _SpiedRows:
    """Stands in for a rank's array map: ``[rows, width]``, and whether the progress record
    already claimed its rows when it was flushed."""

    def __init__(self, rows: int, width: int, record: Path) -> None:
        self.shape = (rows, width)
        self.record = record
        self.flushes: list[str | None] = []

    def flush(self) -> None:
        self.flushes.append(self.record.read_text() if self.record.is_file() else None)


def test_a_build_record_tells_builds_of_other_ranks_or_batch_sizes_apart(tmp_path):
    """Each rank's rows and batches follow from the world size and the batch size: a folder of
    a 2-rank build taken by a 3-rank one would serve rank 1's rows of the old split as those
    of the new, the features of other items in place of theirs."""
    key = dict(features=['media'], dtype='float16')
    progress.atomic_write_text(tmp_path / progress.BUILD_RECORD,
                               json.dumps(progress.build_record(key, 2, 64)))
    assert progress.records_build(tmp_path, progress.build_record(key, 2, 64))
    for other in (progress.build_record(key, 3, 64), progress.build_record(key, 1, 64),
                  progress.build_record(key, 2, 32),
                  progress.build_record(dict(key, dtype='float32'), 2, 64)):
        assert not progress.records_build(tmp_path, other)


@pytest.mark.parametrize('text', [None, '{"key": {"features": ["med'])
def test_a_folder_without_a_whole_build_record_holds_no_build_to_go_on_with(tmp_path, text):
    """No record (a folder of an xmr before records, or one emptied), or one cut short by a
    kill: the folder's rows are of no known build."""
    if text is not None:
        (tmp_path / progress.BUILD_RECORD).write_text(text)
    assert not progress.records_build(tmp_path, progress.build_record({}, 1, 2))


def test_a_rank_s_record_is_read_back_with_its_rows_width_and_unreadable_markers(tmp_path):
    """What a next build reads of a stopped one: the rows written, the array's width (its
    features, not its rows) and each unreadable row's marker, keyed by the row number."""
    written = progress.RankProgress(tmp_path)
    grey = SkippedMedia(index=7, media_path='/data/grey.png', reason='not a decodable image')
    written.record('media', 4, _SpiedRows(10, 32, written.file), {3: grey}, now=True)
    written.record('source', 6, _SpiedRows(20, 16, written.file), now=True)
    read = progress.RankProgress(tmp_path)
    assert (read.rows_done('media'), read.width('media'), read.unreadable('media')) == (
        4, 32, {3: grey})
    assert (read.rows_done('source'), read.width('source'), read.unreadable('source')) == (
        6, 16, {})
    assert (read.rows_done('other'), read.width('other'), read.unreadable('other')) == (
        0, None, {})


def test_a_record_claims_rows_only_once_the_array_holding_them_is_flushed(tmp_path):
    """A record written before the map's pages reach the disk claims rows that a power cut or
    a killed node loses: the next build goes on past them, and the cache holds zeros there."""
    rank = progress.RankProgress(tmp_path)
    first, second = _SpiedRows(8, 4, rank.file), _SpiedRows(8, 4, rank.file)
    rank.record('source', 2, first, now=True)
    rank.record('source', 6, second, now=True)
    assert first.flushes == [None]
    assert [json.loads(text)['source']['rows'] for text in second.flushes] == [2]
    assert json.loads(rank.file.read_text())['source']['rows'] == 6


def test_a_record_replaces_the_file_whole(tmp_path):
    """The record is written beside and renamed over the last: written in place, a kill in
    the write left a cut record, and the next build stopped on it instead of going on."""
    rank = progress.RankProgress(tmp_path)
    rank.record('source', 2, None, now=True)
    os.link(rank.file, tmp_path / 'earlier')
    rank.record('source', 4, None, now=True)
    assert json.loads((tmp_path / 'earlier').read_text())['source']['rows'] == 2
    assert json.loads(rank.file.read_text())['source']['rows'] == 4


def test_rows_written_between_records_are_noted_and_recorded_when_the_build_stops(
        tmp_path, monkeypatch):
    """Within PROGRESS_SECONDS of the last record the rows are only noted (each record flushes
    the arrays); a stop records the latest of each kind, and a record made since replaces
    what was noted before it."""
    clock = [1000.0]
    monkeypatch.setattr(progress, 'time', SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(progress, 'PROGRESS_SECONDS', 30.0)
    rank = progress.RankProgress(tmp_path)
    media, source = _SpiedRows(10, 32, rank.file), _SpiedRows(12, 16, rank.file)
    grey = SkippedMedia(index=3, media_path='grey.png', reason='not a decodable image')
    clock[0] = 1010.0
    rank.record('media', 2, media, {})
    assert not rank.file.exists() and media.flushes == []
    clock[0] = 1031.0
    rank.record('media', 4, media, {3: grey})
    assert progress.RankProgress(tmp_path).rows_done('media') == 4
    clock[0] = 1040.0  # 9 s after that record
    rank.record('media', 6, media, {3: grey})
    rank.record('source', 4, source)
    assert progress.RankProgress(tmp_path).rows_done('media') == 4 and len(media.flushes) == 1
    rank.record_latest()
    read = progress.RankProgress(tmp_path)
    assert (read.rows_done('media'), read.unreadable('media'), read.rows_done('source')) == (
        6, {3: grey}, 4)
    assert len(media.flushes) == 2 and len(source.flushes) == 1

    rank.record('source', 8, source)
    rank.record('source', 12, source, now=True)
    rank.record_latest()
    assert progress.RankProgress(tmp_path).rows_done('source') == 12
