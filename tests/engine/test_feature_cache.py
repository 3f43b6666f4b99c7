"""Feature cache: cached and recomputed steps agree; stale caches and changed data are refused."""
from __future__ import annotations

import errno
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from tests.conftest import REPO, tiny_retriever_cfg, xlmr_spec
from tests.engine.test_distributed import free_port
from xmr.datasets import (
    Annotation,
    CaptionPairDataset,
    MediaRecord,
    MediaSkippedWarning,
    MediaTransform,
    RetrievalDataset,
    dump_annotation,
)
from xmr.datasets.collate import retrieval_collate
from xmr.datasets.synthetic import SyntheticPairDataset, SyntheticRetrievalDataset
from xmr.engine.eval_loops import LoaderSequence
from xmr.engine.feature_cache import (
    CachedFeatureDataset,
    CorruptFeatureCacheError,
    FeatureCache,
    StaleFeatureCacheError,
    prepare_feature_caches,
)
from xmr.engine.feature_cache import dataset as feature_cache_dataset
from xmr.engine.feature_cache.key import changed_media_files
from xmr.engine.hooks import FeatureCacheHook
from xmr.models.backbones.base import ENCODING_VERSION
from xmr.registry import MODELS
from xmr.utils.cli import UserError

TINY_TRANSFORM = dict(type='MediaTransform', backbone=None, size=32)


class ListDataset(Dataset):
    """Items held in memory."""

    def __init__(self, items: list[dict]) -> None:
        self.items = items
        self.metainfo = {'dataset': 'list', 'split': 'train'}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        return dict(self.items[index])


def pair_items(count: int = 6) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    media = {mid: torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=generator)
             for mid in 'abc'}
    sources = ['a red circle', 'a blue square', 'two red circles']
    targets = [('ein roter Kreis', 'de'), ('一个蓝色的正方形', 'zh')]
    return [dict(media=media['abc'[i % 3]], media_id='abc'[i % 3], source_text=sources[i % 3],
                 target_text=targets[i % 2][0], lang=targets[i % 2][1], index=i)
            for i in range(count)]


def loss(model, items: list[dict], phase: str, weights: dict) -> torch.Tensor:
    model.set_phase(phase, weights)
    data = model.data_preprocessor(retrieval_collate(items), True)
    return model(mode='loss', **data)[f'loss_{next(iter(weights))}']


def test_cached_and_recomputed_steps_give_the_same_loss(tiny_retriever, tmp_path):
    inner = SyntheticPairDataset(num_scenes=4, languages=['de', 'zh'], image_size=32)
    cached = CachedFeatureDataset(inner, tmp_path / 'cache')
    cached.prepare(tiny_retriever)
    assert cached.kinds == ['source', 'media']
    items = [cached[i] for i in range(len(cached))]
    assert all(item['media'] is None for item in items)
    assert np.load(tmp_path / 'cache' / 'media.npy').shape == (4, 32)  # one row per scene
    # The wrapper switched the inner dataset's media off; the recompute path needs its own copy.
    renders = SyntheticPairDataset(num_scenes=4, languages=['de', 'zh'], image_size=32)
    plain = [renders[i] for i in range(len(renders))]
    for phase, weights in (('cross_lingual', dict(cl=1.0)), ('cross_modal', dict(cm=1.0))):
        torch.testing.assert_close(loss(tiny_retriever, items, phase, weights),
                                   loss(tiny_retriever, plain, phase, weights),
                                   rtol=1e-5, atol=1e-6)


def test_cached_media_features_replace_the_media_of_a_dataset_that_decodes_them(
        tiny_retriever, tmp_path):
    """A dataset that is no MediaDataset cannot be told to skip its media: the wrapper drops
    them where their features are cached, and keeps them where only captions are."""
    media = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'media')
    media.prepare(tiny_retriever)
    assert media[4]['media'] is None and media[4]['media_features'].shape == (32,)
    sources = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'source',
                                   features=['source'])
    sources.prepare(tiny_retriever)
    assert torch.equal(sources[4]['media'], pair_items()[4]['media'])


def test_a_cached_synthetic_dataset_renders_each_scene_once_at_build_and_never_after(
        tiny_retriever, tmp_path, monkeypatch):
    from xmr.datasets.synthetic import dataset as synthetic

    rendered = []
    render = synthetic.render_scene
    monkeypatch.setattr(synthetic, 'render_scene',
                        lambda scene, *args: rendered.append(scene) or render(scene, *args))
    cached = CachedFeatureDataset(
        SyntheticPairDataset(num_scenes=4, languages=['de', 'zh'], image_size=32),
        tmp_path / 'cache')
    cached.prepare(tiny_retriever)
    assert len(rendered) == 4  # the media encode pass; indexing and the key read no pixels
    cached.prepare(tiny_retriever)  # reopening checks the key: no rendering either
    items = [cached[i] for i in range(len(cached))]
    assert len(rendered) == 4 and all(item['media'] is None for item in items)


def test_a_build_reads_every_item_once(tiny_retriever, tmp_path, monkeypatch):
    """The key and the build share one pass over the items (a pass over CC300K's 2.1M pairs
    takes 6 s; ``tools/cache_features.py`` builds without an index at hand)."""
    dataset = ListDataset(pair_items())
    cached = CachedFeatureDataset(dataset, tmp_path / 'cache', features=['source'])
    reads = []
    read = ListDataset.__getitem__
    monkeypatch.setattr(ListDataset, '__getitem__',
                        lambda self, index: reads.append(index) or read(self, index))
    cached.build(tiny_retriever)
    assert sorted(reads) == list(range(len(dataset)))


def test_float16_storage_halves_the_file_and_keeps_the_loss_close(tiny_retriever, tmp_path):
    dataset = ListDataset(pair_items())
    full = CachedFeatureDataset(dataset, tmp_path / 'fp32')
    half = CachedFeatureDataset(dataset, tmp_path / 'fp16', dtype='float16')
    full.prepare(tiny_retriever)
    half.prepare(tiny_retriever)
    assert np.load(tmp_path / 'fp16' / 'source.npy').dtype == np.float16
    nbytes = lambda path: np.load(path / 'media.npy', mmap_mode='r').nbytes  # noqa: E731
    assert 2 * nbytes(tmp_path / 'fp16') == nbytes(tmp_path / 'fp32')
    items = [half[i] for i in range(len(half))]
    assert items[0]['source_features'].dtype == torch.float32
    torch.testing.assert_close(loss(tiny_retriever, items, 'cross_lingual', dict(cl=1.0)),
                               loss(tiny_retriever, [full[i] for i in range(len(full))],
                                    'cross_lingual', dict(cl=1.0)), rtol=1e-3, atol=1e-4)


def test_distinct_captions_and_media_are_encoded_once(tiny_retriever, tmp_path):
    cached = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache')
    cached.prepare(tiny_retriever)
    meta = json.loads((tmp_path / 'cache' / 'meta.json').read_text())
    assert meta['counts'] == dict(items=6, source=3, media=3, unreadable_media=0)
    assert np.load(tmp_path / 'cache' / 'item_media.npy').tolist() == [0, 1, 2, 0, 1, 2]
    with torch.no_grad():
        tiny_retriever.eval()
        tokens = tiny_retriever.backbone.tokenizer(['a blue square'])
        expected = tiny_retriever.encode_source(tokens)
    torch.testing.assert_close(cached[4]['source_features'], expected[0], rtol=1e-5, atol=1e-6)


def test_other_weights_dtype_or_tokenizer_are_refused_naming_the_field(tiny_retriever, tmp_path):
    dataset = ListDataset(pair_items())
    CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    torch.manual_seed(1)
    other = MODELS.build(tiny_retriever_cfg())
    with pytest.raises(StaleFeatureCacheError, match=r'(?s)backbone: cache has .*Rebuild it'):
        CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(other)
    with pytest.raises(StaleFeatureCacheError, match="dtype: cache has 'float32', now 'float16'"):
        CachedFeatureDataset(dataset, tmp_path / 'cache', dtype='float16').prepare(tiny_retriever)
    tiny_retriever.data_preprocessor.source_tokenizer.max_length = 16
    with pytest.raises(StaleFeatureCacheError, match='preprocessing: cache has'):
        CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)


def test_a_cache_built_by_code_that_encoded_otherwise_is_refused_or_rebuilt(tiny_retriever,
                                                                            tmp_path):
    """A cache's key holds the version of the encoding code (``ENCODING_VERSION``): one built
    before a change of how captions are encoded (its meta without the field, as before
    version 2) is refused naming the folder, the field and why, and rebuilt where the dataset
    may rebuild it, with features of the code in use."""
    dataset = ListDataset(pair_items())
    cache_dir = tmp_path / 'cache'
    CachedFeatureDataset(dataset, cache_dir).prepare(tiny_retriever)
    meta_file = cache_dir / 'meta.json'
    meta = json.loads(meta_file.read_text())
    assert meta['key']['encoding'] == ENCODING_VERSION
    del meta['key']['encoding']
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(StaleFeatureCacheError, match=(
            rf'(?s)feature cache {re.escape(str(cache_dir))} is stale .*encoding: cache has '
            rf'None, now {ENCODING_VERSION} \(xmr encodes captions otherwise since the '
            r'build')):
        CachedFeatureDataset(dataset, cache_dir).prepare(tiny_retriever)
    owned = CachedFeatureDataset(dataset, cache_dir, rebuild_if_stale=True)
    owned.prepare(tiny_retriever)
    assert json.loads(meta_file.read_text())['key']['encoding'] == ENCODING_VERSION


def test_a_cache_of_media_features_alone_is_not_keyed_by_the_captions_encoding(tiny_retriever,
                                                                             tmp_path):
    """Version 2 changed how captions are read: caches of ``r^V`` alone (a gallery's images
    through a ViT-L, hours to rebuild) built before it stay current (found in review)."""
    media = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'media',
                                 features=['media'])
    assert 'encoding' not in media.cache_key(tiny_retriever)
    both = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'both')
    assert both.cache_key(tiny_retriever)['encoding'] == ENCODING_VERSION


def test_changed_captions_are_caught_at_phase_start_and_rebuilt_when_run_owned(
        tiny_retriever, tmp_path):
    items = pair_items()
    CachedFeatureDataset(ListDataset(items), tmp_path / 'cache').prepare(tiny_retriever)
    items[2] = dict(items[2], source_text='a green triangle')  # same count, other caption
    with pytest.raises(StaleFeatureCacheError, match=r"item_digests: cache has \{'media': '(\w+)"
                       r"', 'source': '\w+'\}, now \{'media': '\1', 'source'"):
        CachedFeatureDataset(ListDataset(items), tmp_path / 'cache').prepare(tiny_retriever)
    owned = CachedFeatureDataset(ListDataset(items), tmp_path / 'cache', rebuild_if_stale=True)
    owned.prepare(tiny_retriever)
    with torch.no_grad():
        tokens = tiny_retriever.data_preprocessor(dict(source_text=['a green triangle']))
        expected = tiny_retriever.encode_source(tokens['source_tokens'])[0]
    torch.testing.assert_close(owned[2]['source_features'], expected)


def test_an_item_changed_after_the_phase_started_is_caught_when_read(tiny_retriever, tmp_path):
    items = pair_items()
    cached = CachedFeatureDataset(ListDataset(items), tmp_path / 'cache')
    cached.prepare(tiny_retriever)
    items[2] = dict(items[2], source_text='a green triangle')
    assert cached[1]['source_features'].shape == (32,)
    with pytest.raises(StaleFeatureCacheError, match="item 2 has source_text 'a green triangle'"):
        cached[2]


def test_a_phase_that_trains_the_backbone_refuses_cached_features(tiny_retriever, tmp_path):
    tiny_retriever.backbone.clip.visual.proj.requires_grad_(True)
    cached = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache')
    with pytest.raises(StaleFeatureCacheError, match='this phase trains the backbone'):
        cached.prepare(tiny_retriever)


def test_a_cache_dir_made_ahead_empty_is_built_into_and_a_full_one_is_left_alone(
        tiny_retriever, tmp_path):
    (tmp_path / 'made_ahead').mkdir()
    cached = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'made_ahead')
    cached.prepare(tiny_retriever)
    assert cached[0]['source_features'].shape == (32,)
    other = tmp_path / 'other'
    other.mkdir()
    (other / 'notes.txt').write_text('mine')
    with pytest.raises(FileExistsError, match=re.escape(
            f'{other} exists and holds no feature cache (no meta.json): give the cache a new '
            'or empty folder (cache_dir)')):
        CachedFeatureDataset(ListDataset(pair_items()), other).prepare(tiny_retriever)
    # A rebuild (tools/cache_features.py --overwrite) replaces a cache alone: a cache_dir
    # naming the data's own folder lost its annotation and images.
    with pytest.raises(FileExistsError, match='holds no feature cache'):
        CachedFeatureDataset(ListDataset(pair_items()), other).prepare(tiny_retriever,
                                                                       rebuild=True)
    assert [path.name for path in other.iterdir()] == ['notes.txt']


def test_unprepared_or_missing_caches_fail_clearly(tiny_retriever, tmp_path):
    cached = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache',
                                  build_if_missing=False)
    with pytest.raises(RuntimeError, match=r"is not prepared: .* needs "
                                           r"dict\(type='FeatureCacheHook'\) in custom_hooks"):
        cached[0]
    with pytest.raises(FileNotFoundError, match='build it with tools/cache_features.py'):
        cached.prepare(tiny_retriever)
    with pytest.raises(FileNotFoundError, match='missing meta.json'):
        FeatureCache(tmp_path / 'cache')


def test_annotation_dataset_skips_decoding_once_media_are_cached(tiny_retriever, pair_ann_file,
                                                                 tmp_path):
    dataset = dict(type='CaptionPairDataset', ann_file=str(pair_ann_file),
                   data_root=str(pair_ann_file.parent), transform=TINY_TRANSFORM)
    cached = CachedFeatureDataset(dataset, tmp_path / 'cache')
    assert cached.dataset.with_media is False
    cached.prepare(tiny_retriever)
    plain = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent,
                               transform=TINY_TRANSFORM)
    item = cached[3]
    assert item['media'] is None and item['source_text'] == 'the blue cat'
    with torch.no_grad():
        media = tiny_retriever.data_preprocessor(dict(media=plain[3]['media'][None]))['media']
        expected = tiny_retriever.encode_media(media)[0]
    torch.testing.assert_close(item['media_features'], expected, rtol=1e-5, atol=1e-6)


def test_unreadable_media_skip_their_items_as_the_dataset_would(tiny_retriever, pair_ann_file,
                                                                tmp_path):
    (pair_ann_file.parent / 'blue.png').write_bytes(b'not an image')
    dataset = dict(type='CaptionPairDataset', ann_file=str(pair_ann_file),
                   data_root=str(pair_ann_file.parent), transform=TINY_TRANSFORM,
                   on_corrupt='skip')
    cached = CachedFeatureDataset(dataset, tmp_path / 'cache')
    with pytest.warns(UserWarning, match='blue.png'):
        cached.prepare(tiny_retriever)
    assert json.loads((tmp_path / 'cache' / 'meta.json').read_text())['counts'][
        'unreadable_media'] == 1
    plain = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent,
                               transform=TINY_TRANSFORM, on_corrupt='skip')
    with pytest.warns(UserWarning) as cached_warnings:
        items = [cached[i] for i in range(4)]
    with pytest.warns(UserWarning) as plain_warnings:
        expected = [plain[i] for i in range(4)]
    assert [type(item).__name__ for item in items] == ['dict', 'dict', 'SkippedMedia',
                                                       'SkippedMedia']
    assert items[2:] == expected[2:]  # the file and the reason, as the dataset gives them
    assert str(pair_ann_file.parent / 'blue.png') == items[2].media_path
    assert len(cached_warnings) == len(plain_warnings) == 2
    assert all('blue.png' in str(w.message) for w in cached_warnings)
    batch = retrieval_collate(items)
    assert batch['batch_size'] == 2 and len(batch['skipped_media']) == 2


def test_a_cache_built_before_unreadable_files_were_recorded_names_the_media_id(
        tiny_retriever, pair_ann_file, tmp_path):
    (pair_ann_file.parent / 'blue.png').write_bytes(b'not an image')
    dataset = dict(type='CaptionPairDataset', ann_file=str(pair_ann_file),
                   data_root=str(pair_ann_file.parent), transform=TINY_TRANSFORM,
                   on_corrupt='skip')
    with pytest.warns(UserWarning, match='blue.png'):
        CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    meta_file = tmp_path / 'cache' / 'meta.json'
    meta = json.loads(meta_file.read_text())
    del meta['unreadable_media']  # as an earlier xmr wrote it
    meta_file.write_text(json.dumps(meta))
    cached = CachedFeatureDataset(dataset, tmp_path / 'cache')
    cached.prepare(tiny_retriever)
    with pytest.warns(UserWarning, match='blue: unreadable when the feature cache was built'):
        item = cached[2]
    assert item == (2, 'blue', 'unreadable when the feature cache was built')


def test_media_that_change_every_epoch_are_not_cached(pair_ann_file, tmp_path, monkeypatch):
    logged = []
    monkeypatch.setattr(feature_cache_dataset, 'print_log', lambda msg, **_: logged.append(msg))
    flips = dict(TINY_TRANSFORM, hflip_prob=0.5)
    dataset = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent, transform=flips)
    cached = CachedFeatureDataset(dataset, tmp_path / 'cache')
    assert cached.kinds == ['source'] and dataset.with_media is True
    assert any('media features are not cached because its training transform flips at random'
               in message for message in logged)


def test_cache_pickles_without_its_memory_maps(tiny_retriever, tmp_path):
    cached = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache')
    prepare_feature_caches(DataLoader(cached), tiny_retriever)
    cached[0]
    copy = pickle.loads(pickle.dumps(cached))
    assert copy.cache._arrays == {}
    torch.testing.assert_close(copy[5]['media_features'], cached[5]['media_features'])


@pytest.mark.parametrize('test_mode, kinds', [(False, ['source']), (True, ['source', 'media'])])
def test_video_frames_at_random_offsets_are_not_cached(tmp_path, test_mode, kinds):
    ann = Annotation(dataset='clips', split='train', media_type='video', languages=['en'],
                     source_lang='en', translation_langs=['de'],
                     items=[MediaRecord('v', 'v.mp4', {'en': ['a pancake flips']},
                                        {'de': ['ein Pfannkuchen']})])
    dump_annotation(ann, tmp_path / 'ann.json')
    dataset = CaptionPairDataset(tmp_path / 'ann.json', data_root=tmp_path,
                                 transform=TINY_TRANSFORM, test_mode=test_mode)
    assert CachedFeatureDataset(dataset, tmp_path / 'cache').kinds == kinds


def test_hook_prepares_cached_galleries_and_evaluation_matches(tiny_retriever, tmp_path):
    gallery = SyntheticRetrievalDataset(num_scenes=3, languages=['en', 'de'], image_size=32)
    cached = CachedFeatureDataset(gallery, tmp_path / 'gallery')
    assert cached.kinds == ['media']
    # The wrapper switched its gallery's media off; the recompute path renders its own copy.
    renders = SyntheticRetrievalDataset(num_scenes=3, languages=['en', 'de'], image_size=32)
    loaders = LoaderSequence([DataLoader(cached, batch_size=3, collate_fn=retrieval_collate),
                              DataLoader(renders, batch_size=3, collate_fn=retrieval_collate)])
    runner = SimpleNamespace(model=tiny_retriever, val_loop=SimpleNamespace(dataloader=loaders))
    FeatureCacheHook().before_val(runner)
    tiny_retriever.eval()
    from_cache, plain = (tiny_retriever.val_step(next(iter(loader)))
                         for loader in loaders.loaders)
    for a, b in zip(from_cache, plain):
        torch.testing.assert_close(a['media_embedding'], b['media_embedding'], rtol=1e-5,
                                   atol=1e-6)
        torch.testing.assert_close(a['caption_embeddings']['de'], b['caption_embeddings']['de'])



@pytest.mark.filterwarnings(f'ignore::{MediaSkippedWarning.__module__}.MediaSkippedWarning')
def test_a_cached_gallery_of_real_videos_embeds_as_decoding_them_does(tiny_retriever, shared_data,
                                                                      tmp_path):
    """tools/cache_features.py's rows for decord clips (an unreadable one among them) are the
    embeddings a validation computes from the decoded frames; the unreadable clip is skipped
    and named on both paths, never a row of zeros."""
    names = ['flipping_a_pancake.mkv', 'video_0.mov', 'corrupted.mp4', 'unordered.mov']
    folder = shared_data / 'videos'
    ann = Annotation(dataset='clips', split='test', media_type='video', languages=['en'],
                     items=[MediaRecord(name.split('.')[0], str(folder / name),
                                        {'en': [f'clip {name}']}) for name in names])
    dump_annotation(ann, tmp_path / 'clips.json')

    def gallery():
        return RetrievalDataset(tmp_path / 'clips.json', transform=TINY_TRANSFORM, num_frames=4,
                                on_corrupt='skip')

    cached = CachedFeatureDataset(gallery(), tmp_path / 'cache')
    loaders = LoaderSequence([DataLoader(dataset, batch_size=4, collate_fn=retrieval_collate)
                              for dataset in (cached, gallery())])
    runner = SimpleNamespace(model=tiny_retriever, val_loop=SimpleNamespace(dataloader=loaders))
    FeatureCacheHook().before_val(runner)
    assert cached.kinds == ['media']
    tiny_retriever.eval()
    batches = [next(iter(loader)) for loader in loaders.loaders]
    for batch in batches:
        assert batch['media_id'] == ['flipping_a_pancake', 'video_0', 'unordered']
        assert [Path(path).name for path in batch['skipped_media']] == ['corrupted.mp4']
    from_cache, decoded = (tiny_retriever.val_step(batch) for batch in batches)
    for a, b in zip(from_cache, decoded, strict=True):
        torch.testing.assert_close(a['media_embedding'], b['media_embedding'], rtol=1e-5,
                                   atol=1e-6)


def test_hook_prepares_a_cached_test_gallery(tiny_retriever, tmp_path):
    cached = CachedFeatureDataset(
        SyntheticRetrievalDataset(num_scenes=3, languages=['en', 'de'], image_size=32),
        tmp_path / 'gallery')
    runner = SimpleNamespace(model=tiny_retriever, test_loop=SimpleNamespace(
        dataloader=DataLoader(cached, batch_size=3, collate_fn=retrieval_collate)))
    FeatureCacheHook().before_test(runner)
    assert cached[0]['media_features'].shape == (32,)


@pytest.mark.parametrize('workers', [dict(num_workers=0),
                                     dict(num_workers=1, persistent_workers=True)])
def test_a_validation_while_the_towers_train_reads_the_gallery_of_that_moment(tiny_retriever,
                                                                             tmp_path, workers):
    """CL-FT validates during source_finetune: the hook rebuilds the gallery, not refuses it.
    Persistent workers (the shipped evaluation loaders') read the first gallery's files again,
    their copy of the dataset made before the rebuild."""
    gallery = SyntheticRetrievalDataset(num_scenes=3, languages=['en', 'de'], image_size=32)
    cached = CachedFeatureDataset(gallery, tmp_path / 'gallery', rebuild_if_stale=True)
    loader = DataLoader(cached, batch_size=3, collate_fn=retrieval_collate, **workers)
    runner = SimpleNamespace(model=tiny_retriever, val_loop=SimpleNamespace(dataloader=loader))
    tiny_retriever.backbone.requires_grad_(True)
    tiny_retriever.eval()
    with pytest.raises(StaleFeatureCacheError, match='this phase trains the backbone'):
        cached.prepare(tiny_retriever)  # as a training phase would read it
    projection = tiny_retriever.backbone.clip.visual.proj
    step = torch.randn(projection.shape, generator=torch.Generator().manual_seed(0))
    embeddings = []
    for _ in range(2):
        FeatureCacheHook().before_val(runner)
        embeddings.append(tiny_retriever.val_step(next(iter(loader)))[0]['media_embedding'])
        with torch.no_grad():  # a training step between the validations
            projection.add_(step)
    media = SyntheticRetrievalDataset(num_scenes=1, languages=['en'], image_size=32)[0]['media']
    with torch.no_grad():
        projection.sub_(step)
        now = tiny_retriever.val_step(retrieval_collate([dict(media=media, media_id='m')]))
    torch.testing.assert_close(embeddings[1], now[0]['media_embedding'], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(embeddings[0], embeddings[1], atol=1e-3)



def test_the_changed_media_files_are_named_a_few_at_a_time():
    built = [('a.jpg', '10|1'), ('b.jpg', '10|1'), ('c.jpg', 'missing'), ('d.jpg', '10|1'),
             ('e.jpg', '10|1')]
    now = [('a.jpg', '10|1'), ('b.jpg', '11|2'), ('c.jpg', '10|3'), ('e.jpg', '10|1'),
           ('f.jpg', '10|1'), ('g.jpg', '10|1')]
    assert changed_media_files(built, now) == 'b.jpg, c.jpg, d.jpg and 2 more'
    assert changed_media_files(built, built) == ''
    assert changed_media_files([], now, shown=10) == 'a.jpg, b.jpg, c.jpg, e.jpg, f.jpg, g.jpg'


def test_as_many_changed_media_files_as_are_shown_are_named_without_more():
    built = [('a.jpg', '10|1'), ('b.jpg', '10|1')]
    now = [('a.jpg', '11|2'), ('b.jpg', '11|2')]
    assert changed_media_files(built, now, shown=2) == 'a.jpg, b.jpg'
    assert changed_media_files(built, now, shown=1) == 'a.jpg and 1 more'


def test_replaced_pixels_under_the_same_media_id_are_caught(tiny_retriever, pair_ann_file,
                                                            tmp_path):
    dataset = dict(type='CaptionPairDataset', ann_file=str(pair_ann_file),
                   data_root=str(pair_ann_file.parent), transform=TINY_TRANSFORM)
    CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    blue = pair_ann_file.parent / 'blue.png'
    Image.fromarray(np.full((40, 36, 3), 7, dtype=np.uint8)).save(blue)
    with pytest.raises(StaleFeatureCacheError,
                       match=r"media_files: cache has {'digest'.*\(changed: blue\.png\)\n"):
        CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    owned = CachedFeatureDataset(dataset, tmp_path / 'cache', rebuild_if_stale=True)
    owned.prepare(tiny_retriever)
    plain = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent,
                               transform=TINY_TRANSFORM)
    with torch.no_grad():
        media = tiny_retriever.data_preprocessor(dict(media=plain[2]['media'][None]))['media']
        expected = tiny_retriever.encode_media(media)[0]
    torch.testing.assert_close(owned[2]['media_features'], expected, rtol=1e-5, atol=1e-6)


def test_a_prepared_dataset_drops_the_identity_of_each_media_file(tiny_retriever, pair_ann_file,
                                                                  tmp_path):
    """Each file's identity serves the phase start's check (naming the files that changed) and
    the build; the dataset kept the list after, ~200 bytes a media file in the training
    process and in each worker it is pickled to (570 MiB for CC3M's 3M images)."""
    dataset = dict(type='CaptionPairDataset', ann_file=str(pair_ann_file),
                   data_root=str(pair_ann_file.parent), transform=TINY_TRANSFORM)
    cached = CachedFeatureDataset(dataset, tmp_path / 'cache')
    cached.prepare(tiny_retriever)
    stat = (pair_ann_file.parent / 'blue.png').stat()
    assert f'{stat.st_size}|{stat.st_mtime_ns}'.encode() not in pickle.dumps(cached)
    assert json.loads((tmp_path / 'cache' / 'media_files.json').read_text())[1] == [
        'blue.png', f'{stat.st_size}|{stat.st_mtime_ns}']


def test_a_cache_key_moves_with_its_data(tiny_retriever, pair_ann_file, tmp_path_factory):
    """Paths stay out of the key: the same annotation and media files (times kept) in another
    folder key the same cache."""
    moved = shutil.copytree(pair_ann_file.parent, tmp_path_factory.mktemp('moved') / 'data')
    keys = [CachedFeatureDataset(dict(type='CaptionPairDataset', ann_file=str(folder / 'ann.json'),
                                      data_root=str(folder), transform=TINY_TRANSFORM),
                                 'unused').cache_key(tiny_retriever)
            for folder in (pair_ann_file.parent, moved)]
    assert keys[0] == keys[1]


def test_content_identity_sees_a_change_that_keeps_size_and_mtime(tiny_retriever, pair_ann_file):
    dataset = dict(type='CaptionPairDataset', ann_file=str(pair_ann_file),
                   data_root=str(pair_ann_file.parent), transform=TINY_TRANSFORM)
    by_stat = CachedFeatureDataset(dataset, 'unused')
    by_content = CachedFeatureDataset(dataset, 'unused', media_identity='content')
    before = [by_stat.cache_key(tiny_retriever), by_content.cache_key(tiny_retriever)]
    red = pair_ann_file.parent / 'red.png'
    stat = red.stat()
    data = bytearray(red.read_bytes())
    data[-20] ^= 0xFF
    red.write_bytes(bytes(data))
    os.utime(red, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = [by_stat.cache_key(tiny_retriever), by_content.cache_key(tiny_retriever)]
    assert after[0] == before[0]
    assert after[1]['media_files'] != before[1]['media_files']
    assert after[1]['media_files']['identity'] == 'content'
    with pytest.raises(ValueError, match="media_identity must be one of \\('stat', 'content'\\)"):
        CachedFeatureDataset(dataset, 'unused', media_identity='mtime')


def record_fsyncs_and_renames(patch: pytest.MonkeyPatch, events: list) -> None:
    """Appends ``('fsync', path)`` for each ``os.fsync`` and ``('rename', source, target,
    files)`` for each ``os.rename`` (``files``: those of a folder renamed), in order."""
    fsync, rename = os.fsync, os.rename

    def recording_fsync(descriptor: int) -> None:
        events.append(('fsync', os.readlink(f'/proc/self/fd/{descriptor}')))
        fsync(descriptor)

    def recording_rename(source, target) -> None:
        files = sorted(os.listdir(source)) if os.path.isdir(source) else []
        events.append(('rename', str(source), str(target), files))
        rename(source, target)

    patch.setattr(os, 'fsync', recording_fsync)
    patch.setattr(os, 'rename', recording_rename)


def test_a_built_cache_is_on_disk_before_its_folder_is_renamed(tiny_retriever, tmp_path,
                                                                monkeypatch):
    """After a power cut a renamed cache must hold its features, not zeros of the same length
    (verify() checks lengths only): every file and the folder are fsynced before the rename,
    and the parent folder after it."""
    events = []
    record_fsyncs_and_renames(monkeypatch, events)
    cached = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache')
    cached.prepare(tiny_retriever)
    [moved] = [i for i, event in enumerate(events) if event[0] == 'rename']
    partial = events[moved][1]
    assert events[moved][2] == str(tmp_path / 'cache')
    names = {file.name for file in (tmp_path / 'cache').iterdir()}
    assert {'media.npy', 'source.npy', 'item_media.npy', 'meta.json'} <= names
    assert {f'{partial}/{name}' for name in names} | {partial} <= {
        path for _, path in events[:moved]}
    assert ('fsync', str(tmp_path)) in events[moved + 1:]


@pytest.mark.parametrize('code, reason', [(errno.ENOSPC, ''),
                                          (errno.EDQUOT, r' \(Disk quota exceeded\)'),
                                          (errno.EFBIG, r' \(File too large\)')])
def test_a_full_disk_is_an_error_naming_the_folder_and_bytes_and_leaves_nothing(
        tiny_retriever, tmp_path, monkeypatch, code, reason):
    """A quota (the clusters' full disk) or a file too large (FAT's 4 GB, ulimit -f) came out
    as a bare errno."""
    def full(fd, offset, length):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, 'posix_fallocate', full)
    (tmp_path / 'cache.partial-999999999').mkdir()  # a build killed earlier
    cached = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache')
    # 3 distinct captions x 32 float32 = 384 bytes of rows after the 128-byte .npy header.
    with pytest.raises(UserError, match=r'cache.partial-[\w.-]+-\d+: no space for the feature '
                       rf'cache{reason}: source.npy needs 512 bytes, [\d,]+ are free: free '
                       'space'):
        cached.prepare(tiny_retriever)
    assert sorted(path.name for path in tmp_path.iterdir()) == []


@pytest.mark.parametrize('code', [errno.EOPNOTSUPP, errno.EINVAL])
def test_a_file_system_that_cannot_allocate_ahead_checks_the_free_space_instead(
        tiny_retriever, tmp_path, monkeypatch, code):
    def cannot(fd, offset, length):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, 'posix_fallocate', cannot)
    roomy = CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'roomy')
    roomy.prepare(tiny_retriever)
    assert roomy[0]['source_features'].shape == (32,)
    monkeypatch.setattr(shutil, 'disk_usage', lambda path: SimpleNamespace(free=100))
    with pytest.raises(UserError, match='no space for the feature cache: source.npy needs 512 '
                                        'bytes, 100 are free'):
        CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'full').prepare(tiny_retriever)


def test_a_full_tmpfs_fails_cleanly_instead_of_sigbus(tiny_retriever, tmp_path):
    disk = tmp_path / 'small'
    disk.mkdir()
    if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=16k', 'tmpfs', str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip('cannot mount a tmpfs here (needs root)')
    try:
        items = [dict(source_text=f'caption number {i}') for i in range(200)]  # 25.6 kB of rows
        cached = CachedFeatureDataset(ListDataset(items), disk / 'cache')
        with pytest.raises(UserError, match='source.npy needs 25,728 bytes'):
            cached.prepare(tiny_retriever)
        assert list(disk.iterdir()) == []
    finally:
        subprocess.run(['umount', str(disk)], check=True)


def test_corrupt_files_are_named_and_rebuilt_for_run_owned_caches(tiny_retriever, tmp_path):
    dataset = ListDataset(pair_items())
    CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    source = tmp_path / 'cache' / 'source.npy'
    source.write_bytes(source.read_bytes()[:200])  # truncated
    with pytest.raises(CorruptFeatureCacheError, match=f'{source}: unreadable'):
        CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    owned = CachedFeatureDataset(dataset, tmp_path / 'cache', rebuild_if_stale=True)
    owned.prepare(tiny_retriever)
    assert owned[0]['source_features'].shape == (32,)
    (tmp_path / 'cache' / 'meta.json').write_text('{"key": ')
    with pytest.raises(CorruptFeatureCacheError, match='meta.json: not a feature cache meta file'):
        CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)


def test_other_media_normalisation_is_refused(tiny_retriever, tmp_path):
    """Media features depend on the preprocessor's mean and std: either changing refuses the
    cache (the features of the old normalisation would be read as the new one's)."""
    dataset = ListDataset(pair_items())
    CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    preprocessor = tiny_retriever.data_preprocessor
    for buffer in (preprocessor.std, preprocessor.mean):
        original = buffer.clone()
        buffer.mul_(0.5).add_(0.1)
        with pytest.raises(StaleFeatureCacheError, match='preprocessing: cache has'):
            CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
        buffer.copy_(original)
    CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)


def test_the_padding_colour_of_longest_resizing_keys_the_media_other_modes_keep_their_key(
        tiny_retriever, pair_ann_file):
    """'longest' pads a non-square image with ``fill_color``: other pixels, other features; the
    modes that pad nothing keep one key whatever the colour."""
    def media_key(**transform):
        dataset = dict(type='CaptionPairDataset', ann_file=str(pair_ann_file),
                       data_root=str(pair_ann_file.parent),
                       transform=dict(TINY_TRANSFORM, **transform))
        return CachedFeatureDataset(dataset, 'unused').cache_key(tiny_retriever)[
            'preprocessing']['media']

    wide = torch.full((3, 20, 36), 128, dtype=torch.uint8)
    black, white = (MediaTransform(backbone=None, size=32, resize_mode='longest',
                                   fill_color=colour) for colour in (0, 255))
    assert not torch.equal(black(wide), white(wide))
    assert media_key(resize_mode='longest', fill_color=0) != \
        media_key(resize_mode='longest', fill_color=255)
    assert media_key(fill_color=0) == media_key(fill_color=255)


def test_stat_identity_sees_a_rewrite_of_the_same_size(tiny_retriever, pair_ann_file):
    """A file rewritten in place with as many bytes changes its modification time, which the
    'stat' identity keys on besides the size."""
    dataset = dict(type='CaptionPairDataset', ann_file=str(pair_ann_file),
                   data_root=str(pair_ann_file.parent), transform=TINY_TRANSFORM)
    by_stat = CachedFeatureDataset(dataset, 'unused')
    before = by_stat.cache_key(tiny_retriever)['media_files']
    red = pair_ann_file.parent / 'red.png'
    stat = red.stat()
    data = bytearray(red.read_bytes())
    data[-20] ^= 0xFF
    red.write_bytes(bytes(data))
    os.utime(red, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert red.stat().st_size == stat.st_size
    after = by_stat.cache_key(tiny_retriever)['media_files']
    assert after['identity'] == 'stat' and after['digest'] != before['digest']


def test_an_array_longer_than_the_meta_states_is_corrupt(tiny_retriever, tmp_path):
    dataset = ListDataset(pair_items())
    CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    rows = tmp_path / 'cache' / 'item_source.npy'
    np.save(rows, np.concatenate([np.load(rows), [0]]))
    with pytest.raises(CorruptFeatureCacheError,
                       match=f'{rows}: 7 rows where meta.json states 6'):
        CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)


def test_a_hash_array_shorter_than_the_meta_states_is_corrupt(tiny_retriever, tmp_path):
    """Each read checks its item's hash: a short hash array would fail at the last items'
    reads, an IndexError in a DataLoader worker, instead of at the phase start."""
    dataset = ListDataset(pair_items())
    CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    hashes = tmp_path / 'cache' / 'item_media_hash.npy'
    np.save(hashes, np.load(hashes)[:5])
    with pytest.raises(CorruptFeatureCacheError,
                       match=f'{hashes}: 5 rows where meta.json states 6'):
        CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)


@pytest.mark.parametrize('kind,row', [('media', 3), ('media', -2), ('source', -1)])
def test_an_item_row_outside_its_feature_array_is_corrupt(tiny_retriever, tmp_path, kind, row):
    """pair_items' 6 items read 3 distinct rows of each kind: row 3 would fail in a DataLoader
    worker with numpy's IndexError naming no file, and a negative row would read another row's
    features (-1 only marks unreadable media)."""
    dataset = ListDataset(pair_items())
    CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    rows_file = tmp_path / 'cache' / f'item_{kind}.npy'
    rows = np.load(rows_file)
    assert rows.max() == 2 and rows.min() == 0
    rows[4] = row
    np.save(rows_file, rows)
    with pytest.raises(CorruptFeatureCacheError,
                       match=f'{rows_file}: item 4 reads row {row} of {kind}.npy, which has 3 '
                             r'rows \(1 such items\); delete'):
        CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)


@pytest.mark.parametrize('meta', ['[]', '{"counts": {"items": 6}}', '{"key": {}}'])
def test_a_meta_file_without_key_and_counts_is_corrupt(tmp_path, meta):
    (tmp_path / 'meta.json').write_text(meta)
    with pytest.raises(CorruptFeatureCacheError, match=r'not a feature cache meta file \(no key '
                                                       r'and counts\); delete'):
        FeatureCache(tmp_path)


def test_reordered_items_are_caught_at_phase_start(tiny_retriever, tmp_path):
    """The same captions and media in another order map items to other rows: the key's item
    digests follow the order, so the phase start refuses the cache, not a later read."""
    items = pair_items()
    CachedFeatureDataset(ListDataset(items), tmp_path / 'cache').prepare(tiny_retriever)
    with pytest.raises(StaleFeatureCacheError, match='item_digests: cache has'):
        CachedFeatureDataset(ListDataset(items[1:] + items[:1]),
                             tmp_path / 'cache').prepare(tiny_retriever)


def test_a_cache_built_one_item_a_batch_holds_each_rows_own_features(tiny_retriever, tmp_path):
    """Every batch of the build writes its own rows: with batch_size=1 each caption and media
    is encoded alone, and each item reads the features of its own caption and media."""
    items = pair_items()
    cached = CachedFeatureDataset(ListDataset(items), tmp_path / 'cache', batch_size=1)
    cached.prepare(tiny_retriever)
    with torch.no_grad():
        tiny_retriever.eval()
        for i in range(3):
            data = tiny_retriever.data_preprocessor(dict(source_text=[items[i]['source_text']],
                                                         media=items[i]['media'][None]))
            torch.testing.assert_close(cached[i]['source_features'],
                                       tiny_retriever.encode_source(data['source_tokens'])[0],
                                       rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(cached[i]['media_features'],
                                       tiny_retriever.encode_media(data['media'])[0],
                                       rtol=1e-5, atol=1e-6)


def test_the_build_encodes_in_eval_mode_and_restores_the_models_mode(tiny_retriever, tmp_path,
                                                                     monkeypatch):
    modes = []
    for name in ('encode_source', 'encode_media'):
        encode = getattr(tiny_retriever, name)
        monkeypatch.setattr(tiny_retriever, name,
                            lambda *args, encode=encode: modes.append(
                                tiny_retriever.training) or encode(*args))
    tiny_retriever.train()
    CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache').prepare(tiny_retriever)
    assert modes and not any(modes)
    assert tiny_retriever.training


def test_requested_kinds_and_random_crops_decide_what_is_cached(pair_ann_file, tmp_path):
    dataset = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent,
                                 transform=TINY_TRANSFORM)
    assert CachedFeatureDataset(dataset, tmp_path / 'cache', features=['source']).kinds == [
        'source']
    crops = dict(TINY_TRANSFORM, random_resized_crop=dict(scale=(0.5, 1.0)))
    cropped = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent, transform=crops)
    assert CachedFeatureDataset(cropped, tmp_path / 'cache').kinds == ['source']


def test_random_crops_are_cached_as_one_fixed_draw_when_asked(pair_ann_file, tmp_path):
    crops = dict(TINY_TRANSFORM, random_resized_crop=dict(scale=(0.5, 1.0)))
    cropped = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent, transform=crops)
    assert CachedFeatureDataset(cropped, tmp_path / 'cache',
                                cache_media_when_random=True).kinds == ['source', 'media']


def test_augmentations_that_a_test_mode_dataset_turns_off_leave_its_media_cached(
        pair_ann_file, tmp_path):
    augmented = dict(TINY_TRANSFORM, random_resized_crop=dict(scale=(0.5, 1.0)), hflip_prob=0.5)
    fixed = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent,
                               transform=augmented, test_mode=True)
    assert not fixed.transform.training
    assert CachedFeatureDataset(fixed, tmp_path / 'cache').kinds == ['source', 'media']


@pytest.mark.parametrize('features', [[], ['source', 'text']])
def test_requested_kinds_must_be_known_and_at_least_one(tmp_path, features):
    """An empty list would cache whatever the items carry, as if none were requested."""
    with pytest.raises(ValueError, match=re.escape(
            f"features must be a non-empty subset of ('source', 'media'), got {features}")):
        CachedFeatureDataset(ListDataset(pair_items()), tmp_path / 'cache', features=features)


def test_a_tokenizer_that_composes_captions_keys_another_cache_than_one_that_does_not(tmp_path):
    """NFD and NFC captions get other ids from a tokenizer that composes first, so its caches
    are not interchangeable with one that does not; tokenizers without the choice (open_clip's)
    keep the key they had."""
    from tokenizers import Tokenizer, models, normalizers

    from xmr.engine.feature_cache.key import tokenizer_identity
    from xmr.models.language.tokenizers import HFTokenizer

    vocab = {'[PAD]': 0, '[UNK]': 1, 'mèo': 2}
    for name, normalizer in (('bert', normalizers.BertNormalizer(lowercase=False)),
                             ('plain', None)):
        fast = Tokenizer(models.WordPiece(vocab, unk_token='[UNK]'))
        if normalizer is not None:
            fast.normalizer = normalizer
        fast.save(str(tmp_path / f'{name}.json'))
    composing, plain = (tokenizer_identity(HFTokenizer(tokenizer_file=str(tmp_path / name)))
                        for name in ('bert.json', 'plain.json'))
    assert (composing.pop('compose'), plain.pop('compose')) == (True, False)
    assert composing.pop('pipeline') != plain.pop('pipeline')  # the normaliser differs too
    assert composing == plain
    assert 'compose' not in tokenizer_identity(SimpleNamespace(max_length=77, vocab_size=49408,
                                                               pad_id=0))


def test_a_tokenizers_pipeline_keys_the_cache_alike_on_both_routes_of_one_snapshot(tmp_path):
    """An XLM-R snapshot (its vocabulary cut) keys one cache by folder and by its
    tokenizer.json. Its vocabulary under transformers 5's rebuilt pre-tokeniser (whitespace
    split first, which drops a caption's trailing space) keys another: caches built before xmr
    read the snapshot's own pipeline are rebuilt, not read as current."""
    from xmr.engine.feature_cache.key import tokenizer_identity
    from xmr.models.language.tokenizers import HFTokenizer

    spec = xlmr_spec(cut=True)
    config = {'tokenizer_class': 'XLMRobertaTokenizer', 'pad_token': '<pad>'}
    for name, pre_tokenizer in (('own', spec['pre_tokenizer']),
                                ('rebuilt', {'type': 'Sequence', 'pretokenizers': [
                                    {'type': 'WhitespaceSplit'}, spec['pre_tokenizer']]})):
        (tmp_path / name).mkdir()
        (tmp_path / name / 'tokenizer.json').write_text(
            json.dumps({**spec, 'pre_tokenizer': pre_tokenizer}), encoding='utf-8')
        (tmp_path / name / 'tokenizer_config.json').write_text(json.dumps(config))
    own, by_file, rebuilt = (
        tokenizer_identity(HFTokenizer(**route))
        for route in (dict(name_or_path=str(tmp_path / 'own')),
                      dict(tokenizer_file=str(tmp_path / 'own' / 'tokenizer.json')),
                      dict(name_or_path=str(tmp_path / 'rebuilt'))))
    assert own == by_file
    assert {k for k in own if own[k] != rebuilt[k]} == {'pipeline'}
    assert HFTokenizer(name_or_path=str(tmp_path / 'rebuilt')).encode('Hund ') != \
        HFTokenizer(name_or_path=str(tmp_path / 'own')).encode('Hund ')


def test_a_tokenizer_that_pads_with_another_id_keys_another_cache():
    """A tower that reads its padding (SigLIP's) embeds otherwise under another pad id, the
    setting check_padding tells a user to change."""
    from xmr.engine.feature_cache.key import tokenizer_identity

    plain = dict(max_length=64, vocab_size=32000)
    assert tokenizer_identity(SimpleNamespace(**plain, pad_id=0)) != \
        tokenizer_identity(SimpleNamespace(**plain, pad_id=1))


def test_a_tokenizer_that_truncates_on_the_left_keys_another_cache_others_keep_theirs():
    from xmr.engine.feature_cache.key import tokenizer_identity

    right = dict(max_length=77, vocab_size=49408, pad_id=0)
    assert tokenizer_identity(SimpleNamespace(**right, truncation_side='right')) == \
        tokenizer_identity(SimpleNamespace(**right))
    assert tokenizer_identity(SimpleNamespace(**right, truncation_side='left'))[
        'truncation_side'] == 'left'


def test_a_tokenizer_that_lower_cases_or_cleans_keys_another_cache_others_keep_theirs(
        shared_data):
    """A teacher whose sentence_bert_config.json says ``do_lower_case`` reads 'A Man' as
    'a man', other ids than its cased twin's (and so does one that strips the ends or writes
    the separator as 0); a tokenizer that does none of these keeps its key."""
    from xmr.engine.feature_cache.key import tokenizer_identity
    from xmr.models.language.tokenizers import HFTokenizer

    file = str(shared_data / 'tokenizers' / 'xlm-roberta.tokenizer.json')
    cased, lowered = (HFTokenizer(tokenizer_file=file, max_length=8, lowercase=lowercase)
                      for lowercase in (False, True))
    assert not torch.equal(cased(['A Man'])['input_ids'], lowered(['A Man'])['input_ids'])
    assert tokenizer_identity(lowered) == {**tokenizer_identity(cased), 'lowercase': True}
    assert tokenizer_identity(HFTokenizer(tokenizer_file=file, max_length=8, clean='lower')) == \
        {**tokenizer_identity(cased), 'clean': 'lower'}
    # A sentence-transformers teacher strips the ends: 'a man ' loses its last id.
    stripped = HFTokenizer(tokenizer_file=file, max_length=8, strip=True)
    assert cased(['A Man '])['input_ids'].shape[1] == stripped(['A Man '])['input_ids'].shape[1] + 1
    assert tokenizer_identity(stripped) == {**tokenizer_identity(cased), 'strip': True}
    # CLIPA's tokenizer writes 0 over the separator.
    no_sep = HFTokenizer(tokenizer_file=file, max_length=8, strip_sep_token=True)
    assert not torch.equal(cased(['A Man'])['input_ids'], no_sep(['A Man'])['input_ids'])
    assert tokenizer_identity(no_sep) == {**tokenizer_identity(cased), 'strip_sep_token': True}
    plain = dict(max_length=77, vocab_size=49408, pad_id=0)
    assert tokenizer_identity(SimpleNamespace(**plain, lowercase=False, clean=None)) == \
        tokenizer_identity(SimpleNamespace(**plain))


def test_language_tokens_given_to_nllb_key_another_cache_none_keep_theirs():
    """``language_tokens`` changes the ids a caption of such a language starts with."""
    from xmr.engine.feature_cache.key import tokenizer_identity

    plain = dict(max_length=77, vocab_size=49408, pad_id=0)
    assert tokenizer_identity(SimpleNamespace(**plain, language_tokens={})) == \
        tokenizer_identity(SimpleNamespace(**plain))
    assert tokenizer_identity(SimpleNamespace(**plain, language_tokens={'fil': 'tgl_Latn'}))[
        'language_tokens'] == {'fil': 'tgl_Latn'}


def test_the_media_a_cache_is_built_from_are_checked_with_the_datasets_check(pair_ann_file,
                                                                            tmp_path):
    """The wrapper switches decoding off, so the dataset's own check saw nothing; the build
    stopped at the first missing file, named as if it alone were missing."""
    dataset = dict(type='CaptionPairDataset', ann_file=str(pair_ann_file),
                   data_root=str(pair_ann_file.parent), transform=TINY_TRANSFORM)
    cached = CachedFeatureDataset(dataset, tmp_path / 'cache')
    cached.check_media_exist()
    for name in ('red', 'blue'):
        (tmp_path / f'{name}.png').unlink()
    with pytest.raises(FileNotFoundError, match=(
            r'ann.json: 2 of its 2 media files are missing, the first .*red.png: check '
            r'data_root and data_prefix')):
        cached.check_media_exist()
    assert cached.dataset.with_media is False  # decoding stays off for training
    sources = CachedFeatureDataset(dataset, tmp_path / 'sources', features=['source'])
    sources.check_media_exist()  # a cache of captions alone reads no media


class ReaderRecordingDataset(ListDataset):
    """Items held in memory; each read appends the id of the process reading it to ``log``,
    and a read in a DataLoader worker first sends that worker ``signals`` (a preemption)."""

    def __init__(self, items: list[dict], log: Path, signals: tuple = ()) -> None:
        super().__init__(items)
        self.log, self.signals = log, signals

    def __getitem__(self, index: int) -> dict:
        with open(self.log, 'a', encoding='utf-8') as file:
            file.write(f'{os.getpid()}\n')
        if torch.utils.data.get_worker_info() is not None:
            for number in self.signals:
                os.kill(os.getpid(), number)
        return super().__getitem__(index)


def readers(log: Path) -> set[int]:
    return {int(pid) for pid in log.read_text(encoding='utf-8').split()}


@pytest.mark.parametrize('options, in_workers', [({}, True), (dict(num_workers=0), False)],
                         ids=['loader_workers', 'option'])
def test_a_build_decodes_media_in_the_workers_of_its_loader_unless_told(
        tiny_retriever, tmp_path, options, in_workers):
    """Decoding every media file in the main process took minutes (COCO), hours (videos)."""
    log = tmp_path / 'readers'
    cached = CachedFeatureDataset(ReaderRecordingDataset(pair_items(), log), tmp_path / 'cache',
                                  features=['media'], batch_size=2, **options)
    loader = DataLoader(cached, batch_size=2, num_workers=2, collate_fn=retrieval_collate)
    prepare_feature_caches(loader, tiny_retriever)
    assert bool(readers(log) - {os.getpid()}) is in_workers


def test_the_build_s_workers_leave_a_preemption_s_signals_to_the_main_process(tiny_retriever,
                                                                              tmp_path):
    """A scheduler signals every process of the job: a worker killed by SIGTERM failed the
    build, and with it the run, before PreemptionHook could stop it cleanly."""
    log = tmp_path / 'readers'
    dataset = ReaderRecordingDataset(pair_items(), log, (signal.SIGTERM, signal.SIGINT))
    cached = CachedFeatureDataset(dataset, tmp_path / 'cache', batch_size=2, num_workers=2)
    cached.prepare(tiny_retriever)
    assert len(readers(log) - {os.getpid()}) == 2  # both workers read, and outlived, the signals
    assert cached.cache.meta['counts']['media'] == 3


def test_a_build_in_workers_is_bit_identical_to_one_in_the_main_process(tiny_retriever,
                                                                        pair_ann_file, tmp_path):
    (pair_ann_file.parent / 'blue.png').write_bytes(b'not an image')
    dataset = dict(type='CaptionPairDataset', ann_file=str(pair_ann_file),
                   data_root=str(pair_ann_file.parent), transform=TINY_TRANSFORM,
                   on_corrupt='skip')
    metas = []
    for workers in (0, 2):
        cached = CachedFeatureDataset(dataset, tmp_path / f'cache{workers}', batch_size=1,
                                      num_workers=workers)
        with pytest.warns(UserWarning, match='blue.png') if not workers else nullcontext():
            cached.prepare(tiny_retriever)
        metas.append(cached.cache.meta)
    for name in ('source', 'media', 'item_source', 'item_media', 'item_media_hash'):
        main, workers = (np.load(tmp_path / f'cache{n}' / f'{name}.npy') for n in (0, 2))
        assert main.tobytes() == workers.tobytes() and main.shape == workers.shape, name
    assert metas[0]['counts'] == metas[1]['counts']
    assert metas[1]['counts']['unreadable_media'] == 1
    assert metas[0]['unreadable_media'] == metas[1]['unreadable_media']


def _waiting_rank(rank: int, port: int, model: torch.nn.Module, cache_dir: str,
                  out_dir: str) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    # Collectives give up after 2 s here, as NCCL's do after 10 minutes: rank 0's share of the
    # build takes longer, as a real one over COCO's or CC3M's media does.
    torch.distributed.init_process_group('gloo', rank=rank, world_size=2,
                                         timeout=timedelta(seconds=2))
    build = FeatureCache.build

    def slow_build(*args, **kwargs):
        if rank == 0:
            time.sleep(4)
        return build(*args, **kwargs)

    FeatureCache.build = slow_build
    cached = CachedFeatureDataset(SyntheticPairDataset(num_scenes=2, languages=['de'],
                                                       image_size=32), cache_dir)
    cached.prepare(model)
    Path(out_dir, f'rank{rank}').write_text(json.dumps(cached.cache.meta['counts']),
                                            encoding='utf-8')
    torch.distributed.destroy_process_group()


def test_a_rank_waits_for_a_slower_rank_s_build_past_the_collectives_timeout(tiny_retriever,
                                                                             tmp_path):
    """The ranks waited at a barrier of the default group: a build longer than its timeout
    (NCCL's 10 minutes) stopped them, and the run."""
    torch.multiprocessing.start_processes(
        _waiting_rank, args=(free_port(), tiny_retriever, str(tmp_path / 'cache'), str(tmp_path)),
        nprocs=2, join=True, start_method='fork')
    counts = [json.loads((tmp_path / f'rank{rank}').read_text()) for rank in (0, 1)]
    assert counts[0] == counts[1] and counts[0]['items'] == 2


def test_the_documented_wait_for_a_build_is_the_one_the_ranks_wait():
    docs = ' '.join((REPO / 'docs' / 'distributed.md').read_text().split())
    assert feature_cache_dataset.BUILD_WAIT == timedelta(hours=24)
    assert 'whose timeout is 24 hours (`xmr.engine.feature_cache.dataset.BUILD_WAIT`)' in docs


KILLED_REBUILD = '''
import os, shutil, signal, sys
import torch
from tests.conftest import tiny_retriever_cfg
from tests.engine.test_feature_cache import ListDataset, pair_items
from xmr.engine.feature_cache import CachedFeatureDataset, store
from xmr.registry import MODELS


def killed_removing(folder, *args, **kwargs):
    # ext4 lists this cache's meta.json before some arrays: a kill part-way through the removal
    os.remove(os.path.join(folder, 'meta.json'))
    os.kill(os.getpid(), signal.SIGKILL)


store.shutil.rmtree = killed_removing
torch.manual_seed(0)
CachedFeatureDataset(ListDataset(pair_items()), sys.argv[1]).build(
    MODELS.build(tiny_retriever_cfg()), overwrite=True)
'''


def test_a_rebuild_killed_while_removing_the_old_cache_leaves_a_whole_one(tiny_retriever,
                                                                          tmp_path):
    """SIGKILL while an overwrite removed the cache it replaced (tools/cache_features.py
    --overwrite, a stale run-owned cache): the old cache was left half deleted under its name,
    without meta.json, the new one abandoned, and the next run refused to start ('exists and
    holds no feature cache'). Expected: the new cache whole under the name, read as the first
    was, and the next build removing what the killed one left."""
    cache = tmp_path / 'cache'
    first = CachedFeatureDataset(ListDataset(pair_items()), cache)
    first.prepare(tiny_retriever)
    rebuild = subprocess.run([sys.executable, '-c', KILLED_REBUILD, str(cache)],
                             env=dict(os.environ, PYTHONPATH=str(REPO)),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert rebuild.returncode == -signal.SIGKILL, rebuild.stderr[-2000:]
    again = CachedFeatureDataset(ListDataset(pair_items()), cache)
    again.prepare(tiny_retriever)
    for index in range(len(again)):
        for kind in ('source_features', 'media_features'):
            assert torch.equal(again[index][kind], first[index][kind])
    again.build(tiny_retriever, overwrite=True)
    assert [path.name for path in tmp_path.iterdir()] == ['cache']


def test_a_cache_folder_that_is_a_link_is_built_and_rebuilt_where_it_points(tiny_retriever,
                                                                             tmp_path):
    """work_dirs/cache -> /scratch/cache: the build wrote the cache beside the link, renamed
    the link aside (left there: rmtree cannot remove a link) and a second rebuild stopped with
    NotADirectoryError."""
    from tests.engine.feature_cache.test_ranks import cached_pairs, five_images_ann

    ann_file = five_images_ann(tmp_path)
    (tmp_path / 'work_dirs').mkdir()
    (tmp_path / 'scratch' / 'cache').mkdir(parents=True)
    link = tmp_path / 'work_dirs' / 'cache'
    link.symlink_to(tmp_path / 'scratch' / 'cache')
    cached_pairs(ann_file, link).prepare(tiny_retriever)
    for _ in range(2):
        cached_pairs(ann_file, link).prepare(tiny_retriever, rebuild=True)
    assert link.is_symlink() and (tmp_path / 'scratch' / 'cache' / 'meta.json').is_file()
    assert [p.name for p in (tmp_path / 'work_dirs').iterdir()] == ['cache']
    assert [p.name for p in (tmp_path / 'scratch').iterdir()] == ['cache']
