"""A feature cache built by the ranks of a DDP job together: each encodes its share of the rows,
the result is a single process's byte for byte, and a failure on one rank fails them all."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.engine.test_distributed import free_port
from tests.engine.test_feature_cache import TINY_TRANSFORM, record_fsyncs_and_renames
from xmr.datasets import Annotation, MediaRecord, dump_annotation
from xmr.datasets.synthetic import SyntheticPairDataset
from xmr.engine.feature_cache import CachedFeatureDataset
from xmr.engine.feature_cache import dataset as feature_cache_dataset
from xmr.engine.feature_cache import store as feature_cache_store
from xmr.engine.feature_cache.ranks import rank_rows

NAMES = ('red', 'blue', 'green', 'grey', 'white')


@pytest.mark.parametrize('count, batch_size, world, expected', [
    (10, 2, 2, [range(0, 4), range(4, 10)]),   # 5 batches: 2 and 3
    (5, 2, 2, [range(0, 2), range(2, 5)]),     # the last batch short
    (2, 4, 3, [range(0, 0), range(0, 0), range(0, 2)]),  # fewer batches than ranks
    (0, 4, 2, [range(0, 0), range(0, 0)]),
])
def test_each_rank_encodes_a_contiguous_run_of_whole_batches(count, batch_size, world,
                                                            expected):
    assert [rank_rows(count, batch_size, rank, world) for rank in range(world)] == expected


def five_images_ann(folder: Path) -> Path:
    """Five images with two captions each, of lengths that differ within a batch (padding);
    the fourth file unreadable."""
    ann = Annotation(
        dataset='demo', split='train', media_type='image', languages=['en'], source_lang='en',
        translation_langs=['de'],
        items=[MediaRecord(name, f'{name}.png',
                           {'en': [f'a {name} dog', f'the {name} cat ' + 'and more ' * i]},
                           {'de': [f'ein {name} Hund', f'die {name} Katze']})
               for i, name in enumerate(NAMES)])
    rng = np.random.default_rng(0)
    for name in NAMES:
        Image.fromarray(rng.integers(0, 255, (40, 36, 3), dtype=np.uint8)).save(
            folder / f'{name}.png')
    (folder / 'grey.png').write_bytes(b'not an image')
    dump_annotation(ann, folder / 'ann.json')
    return folder / 'ann.json'


def cached_pairs(ann_file: Path, cache_dir: Path, batch_size: int = 2) -> CachedFeatureDataset:
    dataset = dict(type='CaptionPairDataset', ann_file=str(ann_file),
                   data_root=str(ann_file.parent), transform=TINY_TRANSFORM, on_corrupt='skip')
    return CachedFeatureDataset(dataset, cache_dir, batch_size=batch_size, num_workers=1)


def join_group(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.distributed.init_process_group('gloo', rank=rank, world_size=2)


def one_process_build(ann_file: Path, folder: Path, model: torch.nn.Module) -> None:
    """The cache one process builds with one thread, as each rank of :func:`join_group` has:
    a CPU's kernels may round by their threads' split of the work (an AVX-512 machine's did,
    at 1e-6), and the ranks' cache is the one process's of as many threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cached_pairs(ann_file, folder).prepare(model)
    finally:
        torch.set_num_threads(threads)


def counting_media(model: torch.nn.Module, encoded: list[int]) -> None:
    """Records the media each call of the model's image tower encodes."""
    encode = model.encode_media

    def counted(media: torch.Tensor) -> torch.Tensor:
        encoded.append(len(media))
        return encode(media)

    model.encode_media = counted


def _sharded_rank(rank: int, port: int, model: torch.nn.Module, ann_file: str,
                  out_dir: str) -> None:
    join_group(rank, port)
    encoded: list[int] = []
    counting_media(model, encoded)
    events: list = []
    record_fsyncs_and_renames(pytest.MonkeyPatch(), events)  # in this forked process alone
    cached_pairs(Path(ann_file), Path(out_dir, 'sharded')).prepare(model)
    Path(out_dir, f'rank{rank}').write_text(json.dumps(encoded), encoding='utf-8')
    Path(out_dir, f'events{rank}').write_text(json.dumps(events), encoding='utf-8')
    torch.distributed.destroy_process_group()


def test_two_ranks_build_the_cache_of_one_process_byte_for_byte(tiny_retriever, tmp_path):
    """Rank 0 built the whole cache while the others waited (up to 24 hours for CC3M)."""
    ann_file = five_images_ann(tmp_path)
    torch.multiprocessing.start_processes(
        _sharded_rank, args=(free_port(), tiny_retriever, str(ann_file), str(tmp_path)),
        nprocs=2, join=True, start_method='fork')
    one_process_build(ann_file, tmp_path / 'single', tiny_retriever)
    # 5 media in batches of 2: rank 0 the first batch, rank 1 the other two, grey's unreadable.
    assert [json.loads((tmp_path / f'rank{rank}').read_text()) for rank in (0, 1)] == [
        [2], [1, 1]]
    single, sharded = tmp_path / 'single', tmp_path / 'sharded'
    names = sorted(path.name for path in single.iterdir())
    assert names == sorted(path.name for path in sharded.iterdir())
    for name in set(names) - {'meta.json'}:
        assert (single / name).read_bytes() == (sharded / name).read_bytes(), name
    metas = [json.loads((folder / 'meta.json').read_text()) for folder in (single, sharded)]
    for meta in metas:
        del meta['seconds']
    assert metas[0] == metas[1]
    assert list(metas[1]['unreadable_media']) == ['grey']
    assert not list(tmp_path.glob('*.partial-*'))
    # Rank 1's rows are on disk before its shard folder is named complete: renamed first, a
    # power cut could leave a complete-named shard of rows never written, which rank 0 of the
    # next build would copy into the cache.
    events = json.loads((tmp_path / 'events1').read_text())
    [renamed] = [at for at, event in enumerate(events)
                 if event[0] == 'rename' and Path(event[1]).name == 'shard-1.partial']
    shard, _, files = events[renamed][1:]
    assert files
    fsynced = {path for kind, path in events[:renamed] if kind == 'fsync'}
    assert {shard} | {str(Path(shard, name)) for name in files} <= fsynced


def _prepare_on_rank(rank: int, port: int, model: torch.nn.Module, out: Path,
                     build_wait: timedelta, before_encoding, **cache_options) -> None:
    """Joins the group, prepares the 8-scene synthetic cache with ``before_encoding(media)``
    called before each batch this rank encodes, and writes ``rank<rank>``: the error it
    stopped with and the sizes of the batches it encoded."""
    feature_cache_dataset.BUILD_WAIT = build_wait
    join_group(rank, port)
    encoded: list[int] = []
    encode = model.encode_media

    def encode_counted(media: torch.Tensor) -> torch.Tensor:
        before_encoding(media)
        encoded.append(len(media))
        return encode(media)

    model.encode_media = encode_counted
    cached = CachedFeatureDataset(SyntheticPairDataset(num_scenes=8, languages=['de'],
                                                       image_size=32), out / 'cache',
                                  features=['media'], **cache_options)
    try:
        cached.prepare(model)
        error = ''
    except Exception as raised:
        error = f'{type(raised).__name__}: {raised}'
    (out / f'rank{rank}').write_text(json.dumps(dict(error=error, encoded=encoded)))


def _failing_rank(rank: int, port: int, model: torch.nn.Module, failing: int, where: str,
                  out_dir: str) -> None:
    out = Path(out_dir)

    def fail_or_wait(media: torch.Tensor) -> None:
        if rank == failing:
            raise ValueError(f'planted on rank {rank}')
        wait_for(lambda: list(out.glob('cache.partial-*/failed-rank-*')))

    # 20 s stands for the 24 hours: before, a rank waited for a failed rank 0 until it ran out.
    _prepare_on_rank(rank, port, model, out, timedelta(seconds=20), fail_or_wait, batch_size=2,
                     build_if_missing=where != 'before')
    # The failed rank lives on (as a process handling its error, or a launcher that does not
    # end the job, does): the other must not wait for it to exit.
    wait_for(lambda: all((out / f'rank{other}').is_file() for other in (0, 1)))


def wait_for(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize('failing, where', [(0, 'encoding'), (1, 'encoding'), (0, 'before')])
def test_a_rank_that_fails_fails_the_other_naming_it(tiny_retriever, tmp_path, failing, where):
    """A rank 0 whose build failed left the others at a barrier for 24 hours unless the
    launcher ended them, and then with the launcher's or gloo's message, not its error."""
    torch.multiprocessing.start_processes(
        _failing_rank, args=(free_port(), tiny_retriever, failing, where, str(tmp_path)),
        nprocs=2, join=True, start_method='fork')
    results = [json.loads((tmp_path / f'rank{rank}').read_text()) for rank in (0, 1)]
    other = results[1 - failing]
    if where == 'encoding':
        assert results[failing]['error'] == f'ValueError: planted on rank {failing}'
        assert other['error'].startswith(
            f'RankFailedError: feature cache {tmp_path / "cache"}: rank {failing} failed while '
            f'encoding its rows: ValueError: planted on rank {failing}. Rank {1 - failing} '
            'stops too')
        # 4 batches of 2, two a rank: the other rank stopped before its second. Whether it
        # encoded its first depends on when the failure reached it (the peers' watch may tell
        # it before its first batch, the failure file after it).
        assert other['encoded'] in ([], [2])
    else:
        assert results[0]['error'].startswith('FileNotFoundError: no feature cache at')
        assert other['error'].startswith(
            f'RankFailedError: feature cache {tmp_path / "cache"}: rank 0 failed while reading '
            'the dataset: FileNotFoundError: no feature cache at')
    assert sorted(path.name for path in tmp_path.iterdir()) == ['rank0', 'rank1']


def watching(peer: int) -> bool:
    """Whether this rank still awaits ``peer``'s word that it has ended the step."""
    return any(thread.name == f'feature-cache-watch-rank-{peer}' and thread.is_alive()
               for thread in threading.enumerate())


def _killed_rank(rank: int, port: int, model: torch.nn.Module, killed: int, where: str,
                 out_dir: str) -> None:
    def die_or_wait(media: torch.Tensor) -> None:
        if where == 'encoding':
            if rank == killed:
                os.kill(os.getpid(), signal.SIGKILL)
            # The survivor's check after this batch is the first to find the other gone.
            wait_for(lambda: not watching(killed))

    if where == 'assembling' and rank == killed:
        feature_cache_store._finish_build = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
    _prepare_on_rank(rank, port, model, Path(out_dir), timedelta(seconds=60), die_or_wait,
                     batch_size=1)


@pytest.mark.parametrize('killed, where', [(1, 'encoding'), (0, 'encoding'), (0, 'assembling')])
def test_a_rank_killed_outright_fails_the_other_at_once_naming_it(tiny_retriever, tmp_path,
                                                                  killed, where):
    """A rank killed (SIGKILL, the out-of-memory killer) tells no error: the others went on with
    their shares of the rows (hours for CC3M) where no launcher ended them (another node's
    ranks), and then failed with gloo's 'Connection closed by peer', no rank named."""
    context = multiprocessing.get_context('fork')
    port = free_port()
    processes = [context.Process(target=_killed_rank, args=(
        rank, port, tiny_retriever, killed, where, str(tmp_path))) for rank in (0, 1)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [process.exitcode for process in processes] == [
        -signal.SIGKILL if rank == killed else 0 for rank in (0, 1)]
    survivor = json.loads((tmp_path / f'rank{1 - killed}').read_text())
    doing = dict(encoding='encoding its rows', assembling='assembling the cache')[where]
    assert survivor['error'].startswith(
        f'RankStoppedError: feature cache {tmp_path / "cache"}: rank {killed} ended while {doing} '
        'without reporting an error, or stopped answering (gloo: ')
    assert survivor['error'].endswith(
        f'. Rank {1 - killed} stops too. A process killed outright (SIGKILL, the out-of-memory '
        'killer) tells no error: its log and its node\'s system log (dmesg: "Out of memory: '
        'Killed process") tell why it ended.')
    # 8 media in batches of 1, four a rank: the survivor stopped after its first batch.
    assert survivor['encoded'] == ([1] if where == 'encoding' else [1, 1, 1, 1])
    assert not (tmp_path / 'cache').exists()
    # Stopped, not failed: the rows recorded are kept for the next build, as when every rank
    # is killed (rank 0 killed alone has no part in it; rank 1 killed alone removed them).
    partial, = tmp_path.glob('cache.partial-*')
    if where == 'encoding':
        # With the survivor's row written since its last record (up to 30 s of rows), which
        # it recorded as it stopped: the next build encodes it again otherwise.
        folder = partial if killed == 1 else partial / 'shard-1.partial'
        assert json.loads((folder / 'progress.json').read_text())['media']['rows'] == 1


def _interrupted_rank(rank: int, port: int, model: torch.nn.Module, out_dir: str) -> None:
    """Rank 1 is interrupted at its first batch (Ctrl-C on its node alone) and its process
    lives on, handling it; rank 0 encodes its share."""
    out = Path(out_dir)

    def interrupted(media: torch.Tensor) -> None:
        if rank == 1:
            raise KeyboardInterrupt

    try:
        # 20 s stands for the 24 hours the other rank would wait for an interrupted one.
        _prepare_on_rank(rank, port, model, out, timedelta(seconds=20), interrupted,
                         batch_size=2)
    except KeyboardInterrupt:
        (out / f'rank{rank}').write_text(json.dumps(dict(error='KeyboardInterrupt')))
    wait_for(lambda: all((out / f'rank{other}').is_file() for other in (0, 1)))


def test_a_rank_interrupted_alone_tells_the_other_which_stops_naming_it(tiny_retriever,
                                                                       tmp_path):
    """An interruption is not an ``Exception``: a rank that told the others only of its
    errors left them waiting at the step's end until the group's timeout, then failing as if
    its process were gone."""
    torch.multiprocessing.start_processes(
        _interrupted_rank, args=(free_port(), tiny_retriever, str(tmp_path)),
        nprocs=2, join=True, start_method='fork')
    results = [json.loads((tmp_path / f'rank{rank}').read_text()) for rank in (0, 1)]
    assert results[1] == dict(error='KeyboardInterrupt')
    assert results[0]['error'].startswith(
        f'RankStoppedError: feature cache {tmp_path / "cache"}: rank 1 was interrupted while '
        'encoding its rows: KeyboardInterrupt')
    assert results[0]['encoded'] == [2, 2]  # 8 media in batches of 2, two a rank
    # An interruption of one rank stops the build as one of all does: its folder is kept, with
    # rank 0's rows recorded (rank 0 removed it as for a failure, rows and all).
    partial, = tmp_path.glob('cache.partial-*')
    assert json.loads((partial / 'progress.json').read_text())['media']['rows'] == 4


def _failing_beside_killed_rank(rank: int, port: int, model: torch.nn.Module,
                                out_dir: str) -> None:
    """Rank 1 is killed outright at its first batch; rank 0 fails at its first once it has
    found rank 1 gone."""
    def die_or_fail(media: torch.Tensor) -> None:
        if rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        wait_for(lambda: not watching(1))
        raise ValueError('planted on rank 0')

    _prepare_on_rank(rank, port, model, Path(out_dir), timedelta(seconds=60), die_or_fail,
                     batch_size=1)


def test_a_rank_that_fails_after_another_was_killed_raises_its_own_error(tiny_retriever,
                                                                         tmp_path):
    """The other rank's end tells nothing of this rank's own failure: raising the rank found
    gone in its place hid the error (and its traceback) this rank's log is read for."""
    context = multiprocessing.get_context('fork')
    port = free_port()
    processes = [context.Process(target=_failing_beside_killed_rank, args=(
        rank, port, tiny_retriever, str(tmp_path))) for rank in (0, 1)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [process.exitcode for process in processes] == [0, -signal.SIGKILL]
    assert json.loads((tmp_path / 'rank0').read_text()) == dict(
        error='ValueError: planted on rank 0', encoded=[])
    assert not (tmp_path / 'cache').exists()
