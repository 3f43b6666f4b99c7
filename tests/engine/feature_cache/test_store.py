"""A cache folder on disk: two processes that build one at once (a sweep's jobs sharing a
cache_dir) each finish, whichever renames its folder into place last; a damaged file is named."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.engine.feature_cache.test_progress import cache_files, stop_at
from tests.engine.feature_cache.test_ranks import cached_pairs, five_images_ann
from tests.engine.test_feature_cache import ListDataset, pair_items
from xmr.datasets import Annotation, MediaRecord, MediaSkippedWarning, dump_annotation
from xmr.engine.feature_cache import (
    CachedFeatureDataset,
    CorruptFeatureCacheError,
    FeatureCache,
)
from xmr.engine.feature_cache.progress import BUILD_RECORD, build_record
from xmr.engine.feature_cache.ranks import FAILED_MARKER
from xmr.engine.feature_cache.store import _install, _start_build


def another_process_installs_first(monkeypatch, cache: Path, other: Path) -> None:
    """Rename ``other`` (another process's finished cache) to ``cache`` just before this
    process renames its own build folder there: the moment the two renames meet."""
    rename = Path.rename

    def meeting(self, target):
        if self.name.startswith(f'{cache.name}.partial-') and other.exists():
            rename(other, cache)
        return rename(self, target)

    monkeypatch.setattr(Path, 'rename', meeting)


def test_a_build_finishing_as_another_process_installs_the_same_cache_installs_its_own(
        tiny_retriever, tmp_path, monkeypatch):
    """The rename onto the folder the other process had just put there failed (ENOTEMPTY), and
    the build, finished, removed its folder and stopped its run."""
    dataset = ListDataset(pair_items())
    CachedFeatureDataset(dataset, tmp_path / 'other').prepare(tiny_retriever)
    built = json.loads((tmp_path / 'other' / 'meta.json').read_text())
    another_process_installs_first(monkeypatch, tmp_path / 'cache', tmp_path / 'other')
    cached = CachedFeatureDataset(dataset, tmp_path / 'cache')
    assert cached.prepare(tiny_retriever) is True
    assert json.loads((tmp_path / 'cache' / 'meta.json').read_text())['key'] == built['key']
    assert [path.name for path in tmp_path.iterdir()] == ['cache']
    assert cached[0]['source_features'].shape == (32,)


def test_a_damaged_record_of_the_media_files_is_named_as_corrupt(tiny_retriever, pair_ann_file,
                                                                 tmp_path):
    """``media_files.json`` is read only once a media file changed, to name it: damaged, it
    stopped the phase start with a bare ``JSONDecodeError`` that named no file, where any other
    damaged file of the cache is named, with the fix, and rebuilt for a run-owned cache."""
    dataset = dict(type='CaptionPairDataset', ann_file=str(pair_ann_file),
                   data_root=str(pair_ann_file.parent),
                   transform=dict(type='MediaTransform', backbone=None, size=32))
    CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    record = tmp_path / 'cache' / 'media_files.json'
    record.write_text(record.read_text()[:20])  # cut short
    Image.fromarray(np.full((40, 36, 3), 7, dtype=np.uint8)).save(pair_ann_file.parent /
                                                                   'blue.png')
    with pytest.raises(CorruptFeatureCacheError,
                       match=f'{record}: unreadable .*; delete {tmp_path / "cache"} to rebuild'):
        CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    owned = CachedFeatureDataset(dataset, tmp_path / 'cache', rebuild_if_stale=True)
    owned.prepare(tiny_retriever)
    assert json.loads(record.read_text())


def test_a_stopped_build_taken_over_loses_the_failure_markers_of_its_ranks(tmp_path):
    """A rank that failed while the others were stopped left its marker in the build folder:
    kept, every rank of the build going on from its rows took it for a failure of this build
    and stopped at its first batch, build after build."""
    cache = tmp_path / 'cache'
    record = build_record({'features': ['source']}, world=2, batch_size=4)
    stopped = tmp_path / 'cache.partial-999999999'  # of a process gone since
    stopped.mkdir()
    (stopped / BUILD_RECORD).write_text(json.dumps(record))
    (stopped / f'{FAILED_MARKER}1').write_text('RuntimeError: boom')
    (stopped / 'source.npy').write_bytes(b'rows')
    partial = _start_build(cache, False, record)
    assert partial.name.startswith('cache.partial-') and not stopped.exists()
    assert sorted(path.name for path in partial.iterdir()) == sorted([BUILD_RECORD, 'source.npy'])


def test_media_unreadable_after_a_stopped_build_s_rows_are_marked_at_their_own_row(
        tiny_retriever, tmp_path, monkeypatch):
    """Stopped after the first batch, the next build reads the media from the third: grey,
    the fourth and unreadable, is the second of what it reads. Marked at the row it has there,
    another media's item was skipped and grey's read a row of zeros as its features."""
    monkeypatch.setattr('xmr.engine.feature_cache.progress.PROGRESS_SECONDS', 0)
    ann_file = five_images_ann(tmp_path)
    cached_pairs(ann_file, tmp_path / 'whole').prepare(tiny_retriever)
    with monkeypatch.context() as patch:
        stop_at(patch, tiny_retriever, 1, KeyboardInterrupt)
        with pytest.raises(KeyboardInterrupt):
            cached_pairs(ann_file, tmp_path / 'cache').prepare(tiny_retriever)
    [partial] = tmp_path.glob('cache.partial-*')
    assert json.loads((partial / 'progress.json').read_text())['media']['rows'] == 2
    partial.rename(tmp_path / 'cache.partial-999999999')  # of a process gone since
    cached_pairs(ann_file, tmp_path / 'cache').prepare(tiny_retriever)
    assert cache_files(tmp_path / 'cache') == cache_files(tmp_path / 'whole')
    meta = json.loads((tmp_path / 'cache' / 'meta.json').read_text())
    assert list(meta['unreadable_media']) == ['grey']


def test_a_build_that_cannot_rename_its_folder_into_place_after_its_attempts_fails(
        tmp_path, monkeypatch):
    """Each attempt met a cache just put there by another process (``ENOTEMPTY``): after the
    last, the error is raised, not swallowed with the build's folder left unrenamed and
    the cache reported built."""
    partial, cache = tmp_path / 'cache.partial-1', tmp_path / 'cache'
    partial.mkdir()
    rename, tries = Path.rename, []

    def crowded(self, target):
        if self == partial:
            tries.append(target)
            cache.mkdir(exist_ok=True)
            (cache / 'meta.json').write_text('{}')
            raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), str(target))
        return rename(self, target)

    monkeypatch.setattr(Path, 'rename', crowded)
    with pytest.raises(OSError, match='Directory not empty'):
        _install(partial, cache, attempts=3)
    assert len(tries) == 3 and partial.is_dir()


@pytest.mark.parametrize('training', [True, False])
def test_a_build_leaves_the_model_in_the_mode_it_found_it_in(tiny_retriever, tmp_path,
                                                             training):
    """A gallery cached for an evaluation is built from a model in eval mode: left training
    after the build, the evaluation that follows ran with its dropout on."""
    tiny_retriever.train(training)
    CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache').prepare(
        tiny_retriever, training=False)
    assert tiny_retriever.training is training


def test_a_dataset_of_which_no_media_can_be_read_is_refused_and_leaves_nothing(
        tiny_retriever, tmp_path):
    """Every file unreadable (skipped): no media array is written, and a cache without one
    was installed, to be found corrupt by the next read."""
    ann = Annotation(dataset='bad', split='test', media_type='image', languages=['en'],
                     source_lang='en', translation_langs=['de'],
                     items=[MediaRecord(name, f'{name}.png', {'en': [f'a {name} dog']},
                                        {'de': [f'ein {name} Hund']})
                            for name in ('grey', 'black')])
    for name in ('grey', 'black'):
        (tmp_path / f'{name}.png').write_bytes(b'not an image')
    dump_annotation(ann, tmp_path / 'ann.json')
    dataset = dict(type='CaptionPairDataset', ann_file=str(tmp_path / 'ann.json'),
                   data_root=str(tmp_path), on_corrupt='skip',
                   transform=dict(type='MediaTransform', backbone=None, size=32))
    with pytest.warns(MediaSkippedWarning, match=r'skipping item [01]: '), \
            pytest.raises(ValueError, match='no media of the dataset could be read; nothing to '
                                            'cache'):
        CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    assert not list(tmp_path.glob('cache*'))


def test_a_finished_cache_holds_its_arrays_and_meta_and_no_record_of_its_build(
        tiny_retriever, tmp_path):
    """The build's record and progress are a build folder's, read to go on with it: left in
    the finished cache they outlive the build they describe."""
    CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache').prepare(tiny_retriever)
    assert sorted(path.name for path in (tmp_path / 'cache').iterdir()) == sorted(
        ['meta.json', 'source.npy', 'media.npy', 'item_source.npy', 'item_source_hash.npy',
         'item_media.npy', 'item_media_hash.npy'])


class ItemOnceDataset(ListDataset):
    """Item 1 given once (the captions' read), then ``None`` (a dataset's own skip, no
    marker) when its media are read."""

    def __init__(self, items: list[dict]) -> None:
        super().__init__(items)
        self.read: set[int] = set()

    def __getitem__(self, index: int):
        if index == 1 and index in self.read:
            return None
        self.read.add(index)
        return super().__getitem__(index)


def test_media_of_an_item_the_dataset_gives_no_more_are_marked_unreadable(tiny_retriever,
                                                                          tmp_path):
    """Dropped from the batch unmarked, media ``b`` kept a row of zeros that its items read
    as features; marked, its items are skipped as a dataset skips them."""
    CachedFeatureDataset(ItemOnceDataset(pair_items()), tmp_path / 'cache').prepare(
        tiny_retriever)
    meta = json.loads((tmp_path / 'cache' / 'meta.json').read_text())
    assert meta['unreadable_media'] == {'b': dict(media_path='', reason='the dataset gave no '
                                                                        'item')}
    assert np.load(tmp_path / 'cache' / 'item_media.npy').tolist() == [0, -1, 2, 0, -1, 2]


def test_a_cache_of_media_not_read_from_files_records_no_media_files(tiny_retriever, tmp_path):
    """Media held in memory have no files: the cache lists none, which no file's change is
    then named against."""
    CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache').prepare(tiny_retriever)
    assert FeatureCache(tmp_path / 'cache').media_files() == []
