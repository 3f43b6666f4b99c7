"""xmr.engine.data_languages: a run's data checked against the model before anything trains."""
import re
from types import SimpleNamespace

import pytest

from xmr.datasets import (
    Annotation,
    CaptionPairDataset,
    MediaRecord,
    RetrievalDataset,
    dump_annotation,
)
from xmr.datasets.synthetic import SyntheticPairDataset, SyntheticRetrievalDataset
from xmr.engine.data_languages import (
    caption_languages,
    check_data_languages,
    check_gallery_sizes,
    check_media_sizes,
    unfed_languages,
)
from xmr.engine.feature_cache import CachedFeatureDataset
from xmr.evaluation import RetrievalMetric


def media_dataset(size, with_media=True):
    return SimpleNamespace(transform=SimpleNamespace(size=size), with_media=with_media)


def test_a_transform_of_another_size_than_the_image_towers_is_refused_naming_both():
    """It failed inside the tower at its first batch (the feature cache, or the first
    validation a phase in) with two token counts."""
    model = SimpleNamespace(backbone=SimpleNamespace(image_size=(32, 32)))
    check_media_sizes(model, {'train': media_dataset((32, 32)),
                              'text pairs': media_dataset((64, 64), with_media=False),
                              'no transform': SimpleNamespace()})
    with pytest.raises(ValueError, match=(
            r'^val dataset 0 \(RetrievalDataset\): its transform gives 64x64 media, but the '
            r'image tower of SimpleNamespace takes 32x32: give the dataset the backbone\'s '
            r'transform \(MediaTransform with its backbone and pretrained, or size=32\)$')):
        check_media_sizes(model, {'train': media_dataset((32, 32)),
                                  'val dataset 0 (RetrievalDataset)': media_dataset((64, 64))})
    check_media_sizes(SimpleNamespace(backbone=SimpleNamespace()),  # a text-only backbone
                      {'val': media_dataset((64, 64))})


def test_a_cached_pair_dataset_hands_the_target_languages_of_the_one_it_wraps(tmp_path):
    """The annotation lists English alone; the pairs are English -> German translations, so
    the model must read German, cached or not."""
    dump_annotation(Annotation(
        dataset='demo', split='train', media_type='image', languages=['en'], source_lang='en',
        translation_langs=['de'],
        items=[MediaRecord('red', 'red.png', {'en': ['a red dog']}, {'de': ['ein roter Hund']})]),
        tmp_path / 'ann.json')
    pairs = CaptionPairDataset(tmp_path / 'ann.json', data_root=tmp_path)
    cached = CachedFeatureDataset(pairs, tmp_path / 'cache', features=['source'])
    assert caption_languages(pairs) == caption_languages(cached) == ['de']


def test_a_gallery_that_is_no_annotation_s_is_not_held_to_a_protocol_s_size():
    """A synthetic gallery (smoke runs) has no annotation file to name, nor a benchmark's
    size to keep."""
    gallery = SyntheticRetrievalDataset(num_scenes=3, languages=['en', 'de'], image_size=16)
    check_gallery_sizes(SimpleNamespace(
        dataloader=SimpleNamespace(dataset=gallery),
        evaluator=SimpleNamespace(metrics=[RetrievalMetric(protocol='xtd10_t2i_r10')])))


def test_a_square_tower_s_single_image_size_is_checked_as_both_sides():
    """open_clip's towers state ``image_size`` as one int."""
    model = SimpleNamespace(backbone=SimpleNamespace(image_size=32))
    check_media_sizes(model, {'train': media_dataset((32, 32))})
    with pytest.raises(ValueError, match='gives 32x64 media, but the image tower of '
                                         'SimpleNamespace takes 32x32'):
        check_media_sizes(model, {'train': media_dataset((32, 64))})


def test_a_gallery_without_the_back_translations_routine_3_queries_with_is_refused(tmp_path):
    """It failed at the first validation, val_interval steps into training."""
    from tests.models.retrievers.test_translation import build

    dump_annotation(Annotation(
        dataset='xtd10', split='val', media_type='image', languages=['en', 'de'],
        source_lang='en', back_translation_langs=['de'],
        items=[MediaRecord('red', 'red.png', {'en': ['a red dog'], 'de': ['ein roter Hund']},
                           back_translations={'de': ['a red hound']})]), tmp_path / 'val.json')
    tiny = dict(type='MediaTransform', backbone=None, size=32)
    plain = RetrievalDataset(tmp_path / 'val.json', transform=tiny, with_media=False)
    back = RetrievalDataset(tmp_path / 'val.json', back_translated_languages=['de'],
                            transform=tiny, with_media=False)
    check_data_languages(build('target_only'), {'val dataset 0': plain})
    check_data_languages(build('routine3'), {'val dataset 0': back})
    with pytest.raises(ValueError, match=r"^val dataset 0: routine 'routine3' queries \['de'\]"):
        check_data_languages(build('routine3'), {'val dataset 0': plain})


def test_a_model_without_a_language_check_is_not_checked():
    check_data_languages(SimpleNamespace(), {'train': media_dataset((32, 32))})


def test_a_tower_of_another_height_than_width_takes_media_of_its_height_by_width():
    """open_clip states a non-square tower's image_size as (height, width), as a transform's
    size: the two compare in that order."""
    model = SimpleNamespace(backbone=SimpleNamespace(image_size=[32, 48]))
    check_media_sizes(model, {'train': media_dataset((32, 48))})
    with pytest.raises(ValueError, match=r'^train: its transform gives 48x32 media, but the '
                                         r'image tower of SimpleNamespace takes 32x48'):
        check_media_sizes(model, {'train': media_dataset((48, 32))})


def test_a_synthetic_set_rendered_at_another_size_than_the_image_towers_is_refused():
    """It failed inside open_clip's tower at the first phase that read its images, the phases
    before it trained."""
    model = SimpleNamespace(backbone=SimpleNamespace(image_size=32))
    check_media_sizes(model, {'val': SyntheticRetrievalDataset(num_scenes=3, languages=['en'],
                                                               image_size=32)})
    with pytest.raises(ValueError, match=r"^phase cross_modal dataset \(train_dataloader\): "
                                         r'renders 64x64 images, but the image tower of '
                                         r"SimpleNamespace takes 32x32: set the dataset's "
                                         r'image_size=32$'):
        check_media_sizes(model, {'phase cross_modal dataset (train_dataloader)':
                                  SyntheticRetrievalDataset(num_scenes=3, languages=['en'],
                                                            image_size=64)})


def test_the_fix_for_a_transform_of_another_size_names_the_tower_s_own_geometry():
    """The advice 'or size=256' for a SigLIP 2 tower gave a short-side crop where its weights
    were evaluated on squashed images; it names the record's resize mode and interpolation."""
    from tests.conftest import TINY_CLIP
    from xmr.registry import MODELS

    vision = dict(TINY_CLIP['vision_cfg'], image_size=64)
    backbone = MODELS.build(dict(type='OpenCLIPBackbone', arch=None,
                                 model_cfg=dict(TINY_CLIP, vision_cfg=vision),
                                 pretrained_cfg=dict(resize_mode='squash',
                                                     interpolation='bilinear')))
    with pytest.raises(ValueError, match=re.escape(
            "(MediaTransform with its backbone and pretrained, or backbone=None, size=64, "
            "resize_mode='squash', interpolation='bilinear', fill_color=0)")):
        check_media_sizes(SimpleNamespace(backbone=backbone), {'val': media_dataset((32, 32))})


def _squashing_backbone(resize_mode='squash', interpolation='bilinear'):
    """A tiny open_clip tower of 64 px whose weights' record resizes as given."""
    from tests.conftest import TINY_CLIP
    from xmr.registry import MODELS

    vision = dict(TINY_CLIP['vision_cfg'], image_size=64)
    return MODELS.build(dict(type='OpenCLIPBackbone', arch=None,
                             model_cfg=dict(TINY_CLIP, vision_cfg=vision),
                             pretrained_cfg=dict(resize_mode=resize_mode,
                                                 interpolation=interpolation)))


def test_a_transform_of_the_tower_s_size_and_another_geometry_is_warned_of(monkeypatch):
    """CLIP's short-side crop (the _base_ data configs' ViT-B-32 transform) for a 224 px tower
    whose weights saw squashed images (SigLIP, CLIPA, DFN) passed the size check, and the run
    scored other pixels than the published numbers without a word."""
    from xmr.datasets.transforms import MediaTransform
    from xmr.engine import data_languages

    said = []
    monkeypatch.setattr(data_languages, 'print_log', lambda message, **_: said.append(message))
    model = SimpleNamespace(backbone=_squashing_backbone())
    clip = SimpleNamespace(transform=MediaTransform(backbone=None, size=64), with_media=True)
    check_media_sizes(model, {'test dataset msrvtt': clip})
    assert said == [
        "test dataset msrvtt: its transform resizes with resize_mode='shortest', "
        "interpolation='bicubic', but the weights of the image tower of OpenCLIPBackbone were "
        "evaluated with resize_mode='squash', interpolation='bilinear': give the dataset the "
        "backbone's transform (MediaTransform with its backbone and pretrained, or "
        "backbone=None, size=64, resize_mode='squash', interpolation='bilinear', "
        "fill_color=0) to score as they were scored"]
    said.clear()
    own = MediaTransform(**{k: v for k, v in model.backbone.media_transform().items()
                            if k != 'type'})
    # A random crop replaces the resize in training: its interpolation alone is applied.
    cropping = MediaTransform(backbone=None, size=64, interpolation='bilinear', training=True,
                              random_resized_crop={})
    check_media_sizes(model, {'val': SimpleNamespace(transform=own),
                              'train': SimpleNamespace(transform=cropping)})
    assert said == []
    padding = _squashing_backbone(resize_mode='longest', interpolation='bicubic')
    grey = MediaTransform(backbone=None, size=64, resize_mode='longest', fill_color=128)
    check_media_sizes(SimpleNamespace(backbone=padding), {'val': SimpleNamespace(transform=grey)})
    assert len(said) == 1 and ("resizes with fill_color=128, but the weights of the image tower "
                               'of OpenCLIPBackbone were evaluated with fill_color=0') in said[0]


def test_the_languages_no_phase_holds_are_those_of_a_models_own_modules_only():
    """A model's language the phases' data lacks keeps its modules as built; a dual encoder
    has none (its one text tower reads other languages zero-shot), and a dataset that states
    no languages leaves nothing to tell."""
    fed = {'phase a': SimpleNamespace(metainfo=dict(languages=['de'])),
           'phase b': SimpleNamespace(metainfo=dict(languages=['en', 'zh']))}
    branch = SimpleNamespace(languages=['de', 'fr', 'zh', 'ja'], source_language='en',
                             language_branch=object())
    assert unfed_languages(branch, fed) == ['fr', 'ja']
    assert unfed_languages(branch, {**fed, 'phase c': SimpleNamespace(metainfo={})}) == []
    dual_encoder = SimpleNamespace(languages=['en', 'de', 'fr'], source_language='en')
    assert unfed_languages(dual_encoder, fed) == []


def test_an_english_only_phase_states_its_language_and_leaves_the_others_to_tell(tmp_path):
    """A source finetune's data (the demo's, every CL-FT config's) holds the source language
    alone: it states that, not nothing, so a target language no other phase holds is still
    told. Any such phase silenced the warning, so every run that had one."""
    dump_annotation(Annotation(
        dataset='demo', split='train', media_type='image', languages=['en'], source_lang='en',
        translation_langs=['de'],
        items=[MediaRecord('red', 'red.png', {'en': ['a red dog']}, {'de': ['ein roter Hund']})]),
        tmp_path / 'ann.json')
    english = {'synthetic': SyntheticPairDataset(num_scenes=2, languages=[]),
               'pairs': CaptionPairDataset(tmp_path / 'ann.json', data_root=tmp_path,
                                           source_only=True)}
    branch = SimpleNamespace(languages=['de', 'fr'], source_language='en',
                             language_branch=object())
    for name, dataset in english.items():
        fed = {'phase source_finetune': dataset,
               'phase cross_lingual': SimpleNamespace(metainfo=dict(languages=['de']))}
        assert unfed_languages(branch, fed) == ['fr'], name


def test_unfed_languages_leave_out_the_source_and_keep_the_model_s_order():
    """A model listing its source language among its languages has no module of it to leave
    as built, and the warning names the rest in the order the model lists them (not sorted)."""
    fed = {'phase a': SimpleNamespace(metainfo=dict(languages=['de']))}
    branch = SimpleNamespace(languages=['ja', 'en', 'fr', 'de'], source_language='en',
                             language_branch=object())
    assert unfed_languages(branch, fed) == ['ja', 'fr']


def _two_image_gallery(tmp_path):
    dump_annotation(Annotation(
        dataset='xtd10', split='val', media_type='image', languages=['en', 'de'],
        source_lang='en',
        items=[MediaRecord(name, f'{name}.png', {'en': [f'a {name} dog'], 'de': ['ein Hund']})
               for name in ('red', 'blue')]), tmp_path / 'val.json')
    return RetrievalDataset(tmp_path / 'val.json', with_media=False,
                            transform=dict(type='MediaTransform', backbone=None, size=32))


def test_a_cached_gallery_is_checked_as_the_gallery_it_wraps(tmp_path):
    """The feature cache wraps a validation gallery: its languages are handed to the model's
    check under the dataset's own name, its metainfo to the gallery check, and its size is
    held to its metric's gallery_size all the same."""
    gallery = _two_image_gallery(tmp_path)
    cached = CachedFeatureDataset(gallery, tmp_path / 'cache', features=['media'])
    seen = []
    model = SimpleNamespace(
        check_languages=lambda languages, where: seen.append(('languages', languages, where)),
        check_gallery=lambda metainfo, where: seen.append(('gallery', metainfo, where)))
    check_data_languages(model, {'val dataset 0': cached})
    assert seen == [('languages', ['en', 'de'], 'val dataset 0'),
                    ('gallery', gallery.metainfo, 'val dataset 0')]
    loop = SimpleNamespace(dataloader=SimpleNamespace(dataset=cached),
                           evaluator=SimpleNamespace(metrics=[RetrievalMetric(gallery_size=1)]))
    with pytest.raises(ValueError, match=r'^val dataset 0 \(.*val\.json\) holds 2 media'):
        check_gallery_sizes(loop)


def test_a_gallery_larger_than_its_metric_s_gallery_size_is_refused_too(tmp_path):
    """Recall@10 over 2 media is not recall over 1: any other size than the one the metric
    names is refused, not only a smaller one."""
    loop = SimpleNamespace(dataloader=SimpleNamespace(dataset=_two_image_gallery(tmp_path)),
                           evaluator=SimpleNamespace(metrics=[RetrievalMetric(gallery_size=1)]))
    with pytest.raises(ValueError, match=r"holds 2 media, but its metric's gallery_size=1"):
        check_gallery_sizes(loop)


def test_a_synthetic_set_rendered_square_is_refused_by_a_tower_of_another_width():
    """A synthetic set renders image_size x image_size: a 32x48 tower does not take 32x32,
    though their heights agree."""
    model = SimpleNamespace(backbone=SimpleNamespace(image_size=(32, 48)))
    with pytest.raises(ValueError, match=r'renders 32x32 images, but the image tower of '
                                         r'SimpleNamespace takes 32x48'):
        check_media_sizes(model, {'val': SyntheticRetrievalDataset(
            num_scenes=3, languages=['en'], image_size=32)})


def test_a_transform_stating_no_interpolation_is_not_warned_of_one(monkeypatch):
    """A transform of one's own that states a resize mode and no interpolation departs from
    the tower's record in nothing it states: no warning of ``interpolation=None``."""
    from xmr.engine import data_languages

    said = []
    monkeypatch.setattr(data_languages, 'print_log', lambda message, **_: said.append(message))
    model = SimpleNamespace(backbone=_squashing_backbone())
    own = SimpleNamespace(size=(64, 64), resize_mode='squash')
    check_media_sizes(model, {'val': SimpleNamespace(transform=own)})
    assert said == []
