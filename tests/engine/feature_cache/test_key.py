"""What a feature cache of media is keyed by when the dataset's transform is one of one's own, and
when such a transform's media are cached at all; the precision a backbone's weights are held in."""
from __future__ import annotations

import copy
import functools
import os
import re
import shutil
import threading

import pytest
import torch

from tests.engine.test_feature_cache import ListDataset
from xmr.datasets import (
    Annotation,
    CaptionPairDataset,
    ConcatDataset,
    MediaRecord,
    MediaTransform,
    RetrievalDataset,
    dump_annotation,
)
from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.engine.feature_cache import (
    CachedFeatureDataset,
    StaleFeatureCacheError,
    backbone_fingerprint,
)
from xmr.engine.feature_cache import dataset as feature_cache_dataset
from xmr.engine.feature_cache.key import (
    index_items,
    media_files_identity,
    media_pipeline,
    media_randomness,
    settings_identity,
    tokenizer_identity,
)
from xmr.models.backbones.base import weights_fingerprint
from xmr.registry import TRANSFORMS


@TRANSFORMS.register_module()
class GreyTestTransform:
    """A transform of one's own, as a user writes one: no ``__repr__``, settings in attributes
    (one of them a transform of xmr's, one a function)."""

    def __init__(self, size: int = 32, weights: tuple = (1, 1, 1), training: bool = False,
                 draws_at_random: bool | None = None) -> None:
        self.resize = MediaTransform(backbone=None, size=size)
        self.weights, self.training, self.rounding = list(weights), training, torch.round
        # A method and a partial: their default reprs name addresses too.
        self.cast, self.scale = self.to_uint8, functools.partial(torch.mul, other=1.0)
        if draws_at_random is not None:
            self.draws_at_random = draws_at_random

    def __call__(self, media: torch.Tensor) -> torch.Tensor:
        media = self.resize(media).float()
        weights = torch.tensor(self.weights, dtype=torch.float32).view(3, 1, 1)
        grey = self.rounding(self.scale((media * weights).sum(-3, keepdim=True)) / weights.sum())
        return self.cast(grey.expand_as(media))

    def to_uint8(self, media: torch.Tensor) -> torch.Tensor:
        return media.to(torch.uint8)


def grey_dataset(pair_ann_file, test_mode: bool = True, **settings) -> CaptionPairDataset:
    return CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent, test_mode=test_mode,
                              transform=dict(type='GreyTestTransform', **settings))


def test_a_transform_of_one_s_own_keys_its_cache_by_its_settings_not_its_address(pair_ann_file):
    """Keyed by ``repr``, a transform without one was keyed by its memory address: another
    process (the next run, a resumed one, every other DDP rank) found the cache stale."""
    first = media_pipeline(grey_dataset(pair_ann_file))
    again = media_pipeline(grey_dataset(pair_ann_file))
    assert first == again
    assert first != media_pipeline(grey_dataset(pair_ann_file, weights=(3, 2, 1)))
    assert first != media_pipeline(grey_dataset(pair_ann_file, size=16))  # the inner transform's
    assert '0x' not in str(first)


def test_xmr_s_own_transform_keeps_the_key_it_had(pair_ann_file):
    """A MediaTransform states its settings in its ``repr``: caches built before stay valid."""
    dataset = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent, test_mode=True,
                                 transform=dict(type='MediaTransform', backbone=None, size=32))
    assert media_pipeline(dataset)['transform'] == repr(dataset.transform)


def test_a_setting_known_only_by_its_address_is_refused_naming_it(pair_ann_file):
    dataset = grey_dataset(pair_ann_file)
    dataset.transform.lock = threading.Lock()
    with pytest.raises(ValueError, match=re.escape(
            'transform.lock of the CaptionPairDataset (GreyTestTransform) is known only by its '
            'memory address')):
        media_pipeline(dataset)


def test_a_training_transform_of_one_s_own_caches_its_media_only_when_it_says_it_draws_nothing(
        pair_ann_file, tmp_path, monkeypatch):
    """xmr cannot see whether a transform of one's own draws at random: a random one cached
    was one fixed draw served every epoch, its augmentation silently gone."""
    logged = []
    monkeypatch.setattr(feature_cache_dataset, 'print_log', lambda msg, **_: logged.append(msg))
    silent = CachedFeatureDataset(grey_dataset(pair_ann_file, test_mode=False), tmp_path / 'a')
    assert silent.kinds == ['source']
    assert any('its training transform GreyTestTransform does not say whether it draws at '
               'random (draws_at_random)' in message for message in logged)
    random = grey_dataset(pair_ann_file, test_mode=False, draws_at_random=True)
    assert CachedFeatureDataset(random, tmp_path / 'b').kinds == ['source']
    fixed = grey_dataset(pair_ann_file, test_mode=False, draws_at_random=False)
    assert CachedFeatureDataset(fixed, tmp_path / 'c').kinds == ['source', 'media']
    evaluation = grey_dataset(pair_ann_file, test_mode=True)
    assert CachedFeatureDataset(evaluation, tmp_path / 'd').kinds == ['source', 'media']


def test_a_cache_of_a_transform_of_one_s_own_is_read_by_a_dataset_built_again(
        tiny_retriever, pair_ann_file, tmp_path):
    """What the next run does: the cache built is read, not refused as stale."""
    CachedFeatureDataset(grey_dataset(pair_ann_file), tmp_path / 'cache').prepare(tiny_retriever)
    again = CachedFeatureDataset(grey_dataset(pair_ann_file), tmp_path / 'cache')
    assert again.prepare(tiny_retriever) is False  # read, not built
    plain = grey_dataset(pair_ann_file)
    with torch.no_grad():
        live = tiny_retriever.encode_media(tiny_retriever.data_preprocessor(
            dict(media=plain[0]['media'][None]))['media'])
    torch.testing.assert_close(again[0]['media_features'], live[0])


def test_a_backbone_held_in_half_precision_keys_another_cache_a_float32_one_keeps_its_key(
        tiny_retriever, tmp_path):
    """Weights released in half precision (OpenAI's CLIP) have the same values in a float32
    backbone and in one cast back to float16, so the weights' hash alone keyed both alike: a
    cache of the half backbone's fp16 arithmetic was read by the float32 one (and the reverse)
    without a word. The float32 backbone's key is the one it had, so its caches stay current."""
    backbone = tiny_retriever.backbone
    with torch.no_grad():
        for tensor in backbone.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(tensor.half().float())  # as a half checkpoint loads into float32
    weights = backbone.fingerprint()
    assert backbone_fingerprint(backbone) == weights
    dataset = ListDataset([dict(source_text=f'caption {i}') for i in range(3)])
    CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)
    backbone.half()
    assert backbone.fingerprint() == weights  # the weights' hash cannot tell
    with pytest.raises(StaleFeatureCacheError,
                       match=r"(?s)backbone: cache has '[0-9a-f]{16}', now '[0-9a-f]{16} "
                             r"held in float16'"):
        CachedFeatureDataset(dataset, tmp_path / 'cache').prepare(tiny_retriever)


def video_gallery(folder, num_frames: int = 4, resize_mode: str = 'shortest') -> RetrievalDataset:
    return RetrievalDataset(folder / 'clips.json', data_root=folder, num_frames=num_frames,
                            test_mode=True,
                            transform=dict(type='MediaTransform', backbone=None, size=32,
                                           resize_mode=resize_mode))


@pytest.fixture
def clips(shared_data, tmp_path):
    """A gallery of two real videos copied into ``tmp_path``, and the folder."""
    for name in ('video_0.mov', 'unordered.mov'):
        shutil.copy2(shared_data / 'videos' / name, tmp_path / name)
    ann = Annotation(dataset='clips', split='test', media_type='video', languages=['en'],
                     items=[MediaRecord(name.split('.')[0], name, {'en': [f'clip {name}']})
                            for name in ('video_0.mov', 'unordered.mov')])
    dump_annotation(ann, tmp_path / 'clips.json')
    return tmp_path


@pytest.mark.parametrize('change, field', [
    ('recut', 'media_files'), ('frames', 'preprocessing'), ('resize', 'preprocessing')])
def test_a_media_cache_is_stale_once_a_file_the_frames_or_the_transform_change(
        tiny_retriever, clips, tmp_path, change, field):
    """The captions stay the same; what decides the pixels does not: a video re-cut under its
    name (another clip's bytes), another number of frames sampled, another resize (the whole
    frame squashed, not its centre cropped). An
    unchanged setup reads the cache it built."""
    cache = tmp_path / 'cache'
    CachedFeatureDataset(video_gallery(clips), cache).prepare(tiny_retriever)
    assert CachedFeatureDataset(video_gallery(clips), cache).prepare(tiny_retriever) is False
    settings = dict(frames=dict(num_frames=3), resize=dict(resize_mode='squash')).get(change, {})
    if change == 'recut':
        shutil.copyfile(clips / 'unordered.mov', clips / 'video_0.mov')
    with pytest.raises(StaleFeatureCacheError, match=rf'(?s)\n  {field}: cache has '):
        CachedFeatureDataset(video_gallery(clips, **settings), cache).prepare(tiny_retriever)
    rebuilt = CachedFeatureDataset(video_gallery(clips, **settings), cache, rebuild_if_stale=True)
    assert rebuilt.prepare(tiny_retriever) is True
    with torch.no_grad():
        media = video_gallery(clips, **settings)[0]['media'][None]
        live = tiny_retriever.encode_media(
            tiny_retriever.data_preprocessor(dict(media=media))['media'])
    torch.testing.assert_close(rebuilt[0]['media_features'], live[0], rtol=1e-5, atol=1e-6)


def test_the_media_files_are_identified_with_one_stat_a_file(pair_ann_file, monkeypatch):
    """A phase start keys every media file: a Path built and is_file() asked before its stat()
    took 1.9 s for 120,000 files, 1.1 s so. A missing file is one stat too."""
    dataset = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent, test_mode=True,
                                 transform=dict(type='MediaTransform', backbone=None, size=32))
    stats = []
    real_stat = os.stat
    monkeypatch.setattr(os, 'stat', lambda path, *args, **kwargs: (
        stats.append(os.fspath(path)), real_stat(path, *args, **kwargs))[1])
    (pair_ann_file.parent / 'blue.png').unlink()
    entry, files = media_files_identity(dataset, 'stat')
    assert sorted(stats) == sorted(str(pair_ann_file.parent / f'{name}.png')
                                   for name in ('red', 'blue'))
    red = real_stat(pair_ann_file.parent / 'red.png')
    assert files == [('red.png', f'{red.st_size}|{red.st_mtime_ns}'), ('blue.png', 'missing')]
    assert entry['identity'] == 'stat'


def test_a_concat_is_keyed_by_every_childs_files_and_transform_and_draws_where_one_does(
        pair_ann_file):
    """Read as a dataset of no transform and no annotation, a ConcatDataset's cache was keyed
    by neither its children's files nor their transforms, and a child that draws at random
    was cached with one fixed draw."""
    fixed = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent, test_mode=True,
                               transform=dict(type='MediaTransform', backbone=None, size=32))
    flipped = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent,
                                 transform=dict(type='MediaTransform', backbone=None, size=24,
                                                hflip_prob=0.5))
    whole = ConcatDataset([fixed, fixed])
    entry, files = media_files_identity(whole, 'stat')
    single_entry, single_files = media_files_identity(fixed, 'stat')
    assert files == single_files * 2
    assert entry == {'identity': 'stat', 'datasets': [single_entry, single_entry]}
    assert media_pipeline(whole) == {'datasets': [media_pipeline(fixed)] * 2}
    assert media_pipeline(ConcatDataset([fixed, flipped])) != media_pipeline(whole)
    assert media_randomness(whole) is None
    assert media_randomness(ConcatDataset([fixed, flipped])) == (
        'datasets[1] (CaptionPairDataset, ' f'{pair_ann_file}): its training transform flips '
        'at random')


def test_a_float32_module_with_integer_buffers_keeps_the_key_of_its_weights_alone():
    """Only floating-point tensors say a precision: a float32 module holding an int64 buffer
    (position ids) would otherwise be keyed 'held in int64', and every cache of it built
    before found stale."""
    module = torch.nn.Linear(3, 2)
    module.register_buffer('position_ids', torch.arange(4))
    assert backbone_fingerprint(module) == weights_fingerprint('Linear', module)
    module.half()
    assert backbone_fingerprint(module) == (
        f'{weights_fingerprint("Linear", module)} held in float16')


class MediaListDataset(ListDataset):
    """A dataset of media that is no MediaCaptionDataset, with a transform of its own."""

    def __init__(self, transform) -> None:
        super().__init__([])
        self.transform = transform


def test_a_training_transform_of_a_dataset_that_is_no_media_caption_dataset_draws():
    """The transform's own training flag decides, whatever the dataset: a dataset of one's own
    holding a flipping transform set to train had its one draw cached and served every epoch."""
    flips = MediaTransform(backbone=None, size=32, training=True, hflip_prob=0.5)
    assert media_randomness(MediaListDataset(flips)) == 'its training transform flips at random'
    fixed = MediaTransform(backbone=None, size=32, training=False, hflip_prob=0.5)
    assert media_randomness(MediaListDataset(fixed)) is None


def scale(media, factor=1.0, offset=0.0):
    return media * factor + offset


class Cast:
    def apply(self, media):
        return media


class Round:
    def apply(self, media):
        return media.round()


class Plain:
    """A setting of one's own with no ``__repr__``."""

    def __init__(self, size: int) -> None:
        self.size = size


class Other:
    """Another class with the same attributes as :class:`Plain`, which changes pixels otherwise."""

    def __init__(self, size: int) -> None:
        self.size = size


@pytest.mark.parametrize('first, second', [
    (functools.partial(scale, 2.0), functools.partial(scale, 3.0)),
    (functools.partial(scale, offset=1.0), functools.partial(scale, offset=2.0)),
    (Cast().apply, Round().apply),
    (Plain(3), Other(3)),
], ids=['partial-args', 'partial-keywords', 'methods-named-alike', 'classes-alike'])
def test_settings_that_change_the_pixels_otherwise_have_other_identities(first, second):
    """A partial's arguments, the class a method is of and an object's class each change what a
    transform does, with its attributes' names alike: identities that left them out keyed two
    pipelines alike, and a cache of one was served to the other."""
    identity = functools.partial(settings_identity, name='transform.setting', where='here')
    assert identity(first) != identity(second)
    assert identity(first) == identity(copy.deepcopy(first))


def test_media_files_swapped_between_two_media_ids_change_the_key(tmp_path):
    """Two files of the same size and modification time, each now under the other's media id:
    the items' ids are unchanged and so are the files' stats, and only their names tell that
    each id now reads the other's pixels."""
    for name, byte in (('a.png', b'a'), ('b.png', b'b')):
        (tmp_path / name).write_bytes(byte * 64)
        os.utime(tmp_path / name, ns=(1_000_000_000, 1_000_000_000))

    def gallery(paths):
        ann = Annotation(dataset='swap', split='test', media_type='image', languages=['en'],
                         items=[MediaRecord(mid, path, {'en': [f'item {mid}']})
                                for mid, path in zip('xy', paths)])
        dump_annotation(ann, tmp_path / 'ann.json')
        return RetrievalDataset(tmp_path / 'ann.json', data_root=tmp_path, test_mode=True,
                                transform=dict(type='MediaTransform', backbone=None, size=32))

    before, _ = media_files_identity(gallery(['a.png', 'b.png']), 'stat')
    after, _ = media_files_identity(gallery(['b.png', 'a.png']), 'stat')
    assert before != after
    assert before == media_files_identity(gallery(['a.png', 'b.png']), 'stat')[0]


def test_a_concat_of_a_dataset_with_files_and_one_without_is_keyed_by_the_files(pair_ann_file):
    """One child read from files is enough to key the whole by them: keyed as media without
    files, a concat of such a child and an in-memory one kept its cache when a file changed."""
    files = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent, test_mode=True,
                               transform=dict(type='MediaTransform', backbone=None, size=32))
    memory = ListDataset([dict(source_text='a caption', media_id='m')])
    entry, listed = media_files_identity(ConcatDataset([memory, files]), 'stat')
    child_entry, child_files = media_files_identity(files, 'stat')
    assert entry == {'identity': 'stat', 'datasets': [None, child_entry]}
    assert listed == child_files
    assert media_files_identity(ConcatDataset([memory, memory]), 'stat') == (None, [])


@pytest.mark.parametrize('identity', ['stat', 'content'])
def test_a_folder_where_a_media_file_should_be_is_keyed_as_missing(pair_ann_file, identity):
    """A folder is no media file (``Path.is_file``): keyed by its stat, it was taken for a
    file, and the content identity stopped the phase start opening it."""
    dataset = CaptionPairDataset(pair_ann_file, data_root=pair_ann_file.parent, test_mode=True,
                                 transform=dict(type='MediaTransform', backbone=None, size=32))
    (pair_ann_file.parent / 'blue.png').unlink()
    (pair_ann_file.parent / 'blue.png').mkdir()
    _, files = media_files_identity(dataset, identity)
    assert files[1] == ('blue.png', 'missing')


class TokenizerOfVocabulary:
    """A tokenizer's identity as xmr reads it: its length, vocabulary size and padding id."""

    def __init__(self, vocab_size: int) -> None:
        self.max_length, self.vocab_size, self.pad_id = 16, vocab_size, 0


def test_a_tokenizer_of_another_vocabulary_size_keys_another_cache():
    """A vocabulary grown by added tokens gives a caption other ids at the same length and
    padding: its cache was served to the tokenizer before."""
    assert tokenizer_identity(TokenizerOfVocabulary(1000)) != tokenizer_identity(
        TokenizerOfVocabulary(1001))
    assert tokenizer_identity(TokenizerOfVocabulary(1000))['vocab_size'] == 1000


class SkippingDataset(ListDataset):
    """Item 1 skipped with the marker a dataset of ``on_corrupt='skip'`` gives."""

    def __getitem__(self, index: int):
        if index == 1:
            return SkippedMedia(index=index, media_path='b.png', reason='unreadable')
        return super().__getitem__(index)


def test_an_item_skipped_while_its_captions_are_read_is_refused_naming_it():
    """The index reads captions only; an item skipped then would leave its row unset, which
    a cache keyed by the others' rows cannot serve."""
    items = [dict(source_text=f'caption {i}', media_id=str(i)) for i in range(3)]
    with pytest.raises(ValueError, match='dataset item 1 was skipped while only its captions '
                                         'were read; a feature cache needs every item'):
        index_items(SkippingDataset(items), ['source', 'media'])
