"""Registered synthetic datasets and corpus: contract, determinism, splits, galleries."""
from pathlib import Path

import numpy as np
import pytest
import torch

from xmr.datasets.collate import retrieval_collate
from xmr.datasets.synthetic import dataset as synthetic_dataset
from xmr.datasets.synthetic import scenes
from xmr.datasets.synthetic.captions import CAPTION_LANGUAGES, CAPTION_STYLES, caption_scene
from xmr.datasets.synthetic.dataset import (
    SyntheticPairDataset,
    SyntheticRetrievalDataset,
    synthetic_caption_corpus,
)
from xmr.datasets.synthetic.scenes import render_scene, scene_at
from xmr.registry import DATASETS, FUNCTIONS

TARGETS = ['de', 'fr', 'zh', 'ja']


def captions_in_all_styles(scene, lang):
    return {caption_scene(scene, lang, style): style for style in CAPTION_STYLES}


def test_registered_and_built_from_config():
    pairs = DATASETS.build(dict(type='SyntheticPairDataset', num_scenes=4, languages=['de']))
    assert isinstance(pairs, SyntheticPairDataset)
    gallery = DATASETS.build(dict(type='SyntheticRetrievalDataset', num_scenes=4))
    assert isinstance(gallery, SyntheticRetrievalDataset)
    corpus = FUNCTIONS.build(dict(type='synthetic_caption_corpus', languages=['zh'],
                                  num_scenes=3))
    assert len(corpus) == 3 * len(CAPTION_STYLES)


def test_pair_items_follow_the_contract():
    dataset = SyntheticPairDataset(num_scenes=6, languages=TARGETS, image_size=32)
    assert len(dataset) == 6 * 4
    item = dataset[5]
    assert set(item) == {'media', 'media_id', 'source_text', 'target_text', 'lang', 'index'}
    assert item['media'].dtype == torch.uint8 and item['media'].shape == (3, 32, 32)
    assert item['index'] == 5 and item['lang'] == TARGETS[5 % 4]
    # Item 5 is scene 1 in the second language: both captions describe that scene.
    scene = scene_at(0, 'train', 1)
    assert item['source_text'] in captions_in_all_styles(scene, 'en')
    assert item['target_text'] in captions_in_all_styles(scene, item['lang'])
    assert item['media_id'] == dataset[4]['media_id'] != dataset[8]['media_id']
    assert torch.equal(item['media'], dataset[4]['media'])
    assert dataset.metainfo['languages'] == TARGETS
    assert SyntheticPairDataset(6, TARGETS, image_size=64)[0]['media'].shape == (3, 64, 64)


def test_english_only_pairs_have_no_target():
    dataset = SyntheticPairDataset(num_scenes=5, languages=[])
    assert len(dataset) == 5
    item = dataset[3]
    assert item['target_text'] is None and item['lang'] == 'en'
    assert item['source_text'] in captions_in_all_styles(scene_at(0, 'train', 3), 'en')


def test_items_are_deterministic_across_instances():
    first = SyntheticPairDataset(8, TARGETS, seed=3)
    second = SyntheticPairDataset(8, TARGETS, seed=3)
    for index in (0, 7, 31):
        a, b = first[index], second[index]
        assert torch.equal(a['media'], b['media'])
        assert (a['source_text'], a['target_text']) == (b['source_text'], b['target_text'])
    other_seed = SyntheticPairDataset(8, TARGETS, seed=4)
    assert not torch.equal(first[0]['media'], other_seed[0]['media'])
    gallery_a = SyntheticRetrievalDataset(10, seed=3)
    gallery_b = SyntheticRetrievalDataset(10, seed=3)
    for index in (0, 9):
        assert torch.equal(gallery_a[index]['media'], gallery_b[index]['media'])
        assert gallery_a[index]['captions'] == gallery_b[index]['captions']


def test_pairs_read_in_order_draw_each_scene_once(monkeypatch):
    draws, sample_scene = [], scenes.sample_scene

    def counted(rng):
        draws.append(rng)
        return sample_scene(rng)

    monkeypatch.setattr(scenes, 'sample_scene', counted)
    dataset = SyntheticPairDataset(6, TARGETS, seed=11)
    dataset.with_media = False
    scene_at.cache_clear()
    one_language = [dataset[i]['source_text'] for i in range(0, len(dataset), len(TARGETS))]
    drawn_for_one_language = len(draws)
    scene_at.cache_clear()
    every_item = [dataset[i]['source_text'] for i in range(len(dataset))]
    assert len(draws) == 2 * drawn_for_one_language >= 2 * 6
    assert every_item[::len(TARGETS)] == one_language


def test_shuffled_epochs_of_the_demo_draw_each_scene_once():
    """Two shuffled passes over the demo's training scenes and one over its evaluation sets
    (4 languages a scene): every scene is drawn the first time it is read only."""
    from mmengine.config import Config

    configs = Path(__file__).resolve().parents[3] / 'configs'
    demo = Config.fromfile(str(configs / 'demo/static_tiny-clip_synthetic.py'))
    splits = {'train': demo.train_dataloader.dataset.num_scenes,
              'val': demo.val_dataloader.dataset.num_scenes,
              'test': demo.test_dataloader.dataset.num_scenes}
    scene_at.cache_clear()
    generator = torch.Generator().manual_seed(0)
    for split, count in splits.items():
        for _ in range(2 if split == 'train' else 1):
            for index in torch.randperm(4 * count, generator=generator).tolist():
                scene_at(0, split, index // 4)
    assert scene_at.cache_info().misses == sum(splits.values())


def test_pair_styles_vary_across_items():
    dataset = SyntheticPairDataset(40, ['de'])
    styles = {captions_in_all_styles(scene_at(0, 'train', i), 'de')[dataset[i]['target_text']]
              for i in range(40)}
    assert styles == set(CAPTION_STYLES)


def test_splits_are_disjoint():
    train = SyntheticPairDataset(300, [], split='train')
    val = SyntheticRetrievalDataset(100, ['en'], split='val')
    test = SyntheticRetrievalDataset(100, ['en'], split='test')
    train_captions = {train[i]['source_text'] for i in range(len(train))}
    val_scenes = {scene.description for _, scene in val.gallery}
    test_scenes = {scene.description for _, scene in test.gallery}
    assert not val_scenes & test_scenes
    assert not {scene_at(0, 'train', i).description for i in range(300)} & val_scenes
    # No training caption of any style describes a validation image.
    val_captions = {caption for _, scene in val.gallery
                    for caption in captions_in_all_styles(scene, 'en')}
    assert not train_captions & val_captions
    assert train[0]['media_id'] != val[0]['media_id']


def test_gallery_has_distinct_scenes_and_captions_per_style():
    gallery = SyntheticRetrievalDataset(300, captions_per_image=3)
    descriptions = [scene.description for _, scene in gallery.gallery]
    assert len(set(descriptions)) == 300
    styles_seen = set()
    for index in (0, 1, 2, 150, 299):
        item = gallery[index]
        assert set(item) == {'media', 'media_id', 'captions', 'index'}
        assert item['media'].shape == (3, 32, 32) and item['media'].dtype == torch.uint8
        assert list(item['captions']) == list(CAPTION_LANGUAGES)
        scene = gallery.gallery[index][1]
        for lang, captions in item['captions'].items():
            assert len(captions) == 3
            written = captions_in_all_styles(scene, lang)
            styles = [written[caption] for caption in captions]
            assert len(set(styles)) == 3
            styles_seen.update(styles)
    assert styles_seen == set(CAPTION_STYLES)
    # A larger gallery extends a smaller one.
    small = SyntheticRetrievalDataset(50, captions_per_image=3)
    assert [s for _, s in small.gallery] == [s for _, s in gallery.gallery[:50]]
    assert small[49]['captions'] == gallery[49]['captions']


def test_retrieval_collate_batches_both_kinds_of_items():
    gallery = SyntheticRetrievalDataset(4, ['en', 'zh'])
    batch = retrieval_collate([gallery[i] for i in range(4)])
    assert batch['batch_size'] == 4 and batch['media'].shape == (4, 3, 32, 32)
    assert batch['captions'][2] == gallery[2]['captions']
    pairs = SyntheticPairDataset(2, [])
    batch = retrieval_collate([pairs[0], pairs[1]])
    assert batch['media'].shape == (2, 3, 32, 32) and batch['target_text'] == [None, None]
    assert batch['lang'] == ['en', 'en']


def test_corpus_covers_every_language_and_style():
    corpus = synthetic_caption_corpus(TARGETS, num_scenes=4, seed=1)
    assert len(corpus) == 4 * len(TARGETS) * len(CAPTION_STYLES)
    scene = scene_at(1, 'train', 2)
    for lang in TARGETS:
        assert set(captions_in_all_styles(scene, lang)) <= set(corpus)
    assert not any(caption in corpus for caption in captions_in_all_styles(scene, 'en'))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="'ko'"):
        SyntheticPairDataset(4, ['de', 'ko'])
    with pytest.raises(TypeError, match='string'):
        SyntheticPairDataset(4, 'de')
    with pytest.raises(ValueError, match='split'):
        SyntheticRetrievalDataset(4, split='dev')
    with pytest.raises(ValueError, match='captions_per_image'):
        SyntheticRetrievalDataset(4, captions_per_image=6)
    with pytest.raises(ValueError, match='num_scenes=5000 exceeds'):
        SyntheticRetrievalDataset(5000, split='val')
    with pytest.raises(ValueError, match='num_scenes'):
        SyntheticPairDataset(0, [])
    with pytest.raises(ValueError, match='image_size'):
        SyntheticPairDataset(4, [], image_size=8)
    with pytest.raises(IndexError, match='outside'):
        SyntheticPairDataset(4, ['de'])[4]


def test_language_codes_of_any_accepted_form_name_the_synthetic_languages():
    """``jp`` (XTD10's), ``zh-CN`` and ``DE`` are the canonical ``ja``, ``zh`` and ``de``, as for
    every other dataset (docs/data.md, language codes): the items and metainfo carry the
    canonical codes that the language branch and the metric keys use."""
    pairs = SyntheticPairDataset(num_scenes=2, languages=['jp', 'zh-CN', 'DE'])
    assert pairs.languages == ('ja', 'zh', 'de')
    assert [pairs[i]['lang'] for i in range(3)] == ['ja', 'zh', 'de']
    assert pairs[0]['target_text'] == SyntheticPairDataset(2, ['ja'])[0]['target_text']
    gallery = SyntheticRetrievalDataset(num_scenes=2, languages=['en', 'jp'])
    assert gallery.metainfo['languages'] == ['en', 'ja']
    assert gallery[1]['captions'] == SyntheticRetrievalDataset(2, ['en', 'ja'])[1]['captions']
    assert synthetic_caption_corpus(['zh_CN'], num_scenes=2) == synthetic_caption_corpus(
        ['zh'], num_scenes=2)


def test_two_codes_of_one_language_and_codes_of_no_language_are_named():
    with pytest.raises(ValueError, match="'ja' and 'jp' are both the language 'ja'"):
        SyntheticPairDataset(2, ['ja', 'jp'])
    with pytest.raises(ValueError, match="unknown language code 'xx'"):
        SyntheticRetrievalDataset(2, ['en', 'xx'])
    # A real language the grammars do not write is named with the five they do.
    with pytest.raises(ValueError, match=r"\['ko'\].*exist in \('en', 'de', 'fr', 'zh', 'ja'\)"):
        SyntheticPairDataset(2, ['kor_Hang'])


@pytest.mark.parametrize('name, value', [
    ('num_scenes', True), ('num_scenes', 2.0), ('image_size', 32.0), ('captions_per_image', 0),
    ('captions_per_image', True)])
def test_a_count_that_is_no_positive_integer_is_refused_naming_it(name, value):
    arguments = dict(num_scenes=2, languages=['en'], image_size=32, captions_per_image=1)
    with pytest.raises(ValueError, match=f'{name} must be a positive integer, got {value!r}'):
        SyntheticRetrievalDataset(**{**arguments, name: value})


def test_a_negative_seed_is_refused_when_the_dataset_is_built():
    with pytest.raises(ValueError, match='seed must be a non-negative integer, got -1'):
        SyntheticPairDataset(2, [], seed=-1)
    with pytest.raises(ValueError, match='seed must be a non-negative integer, got -1'):
        synthetic_caption_corpus(['de'], num_scenes=2, seed=-1)


def test_the_corpus_of_no_scenes_is_refused():
    with pytest.raises(ValueError, match='num_scenes must be a positive integer, got 0'):
        synthetic_caption_corpus(['de'], num_scenes=0)


def test_the_bounds_of_image_size_captions_per_image_and_gallery_size_are_allowed(monkeypatch):
    assert SyntheticPairDataset(1, [], image_size=16)[0]['media'].shape == (3, 16, 16)
    every_style = SyntheticRetrievalDataset(1, ['fr'], captions_per_image=5)
    assert sorted(every_style[0]['captions']['fr']) == \
        sorted(captions_in_all_styles(every_style.gallery[0][1], 'fr'))
    monkeypatch.setattr(synthetic_dataset, 'split_sizes',
                        lambda: {'train': 8, 'val': 3, 'test': 3})
    assert len(SyntheticRetrievalDataset(3)) == 3
    with pytest.raises(ValueError,
                       match="num_scenes=4 exceeds the 3 distinct scenes of split 'val'"):
        SyntheticRetrievalDataset(4)


def test_a_gallery_without_languages_is_refused():
    with pytest.raises(ValueError, match='must name at least one language'):
        SyntheticRetrievalDataset(2, [])


def test_a_split_too_small_for_the_gallery_within_its_draws_is_named(monkeypatch):
    # One draw a scene: 300 draws of the 4,332 validation scenes repeat some.
    monkeypatch.setattr(synthetic_dataset, '_MAX_DRAWS_PER_SCENE', 1)
    with pytest.raises(ValueError, match=r"found only \d+ distinct scenes of split 'val' in 300 "
                                         r'draws.*holds 4332\)'):
        SyntheticRetrievalDataset(300, ['en'])


def test_a_negative_or_past_the_end_index_is_refused_naming_the_range():
    pairs = SyntheticPairDataset(2, ['de', 'fr'])
    gallery = SyntheticRetrievalDataset(3, ['en'])
    for read in (pairs.__getitem__, pairs.captions_of, gallery.__getitem__, gallery.captions_of):
        with pytest.raises(IndexError, match=r'index -1 is outside \[0, \d\)'):
            read(-1)
    with pytest.raises(IndexError, match=r'SyntheticRetrievalDataset index 3 is outside \[0, 3\)'):
        gallery.captions_of(3)


def test_metainfo_holds_the_generators_settings():
    pairs = SyntheticPairDataset(3, ['zh', 'de'], split='test', image_size=16, seed=5)
    common = {'dataset': 'synthetic', 'split': 'test', 'media_type': 'image', 'source_lang': 'en',
              'num_scenes': 3, 'image_size': 16, 'seed': 5, 'styles': list(CAPTION_STYLES)}
    assert pairs.metainfo == {**common, 'languages': ['zh', 'de']}
    gallery = SyntheticRetrievalDataset(3, ['de'], split='test', image_size=16, seed=5,
                                        captions_per_image=4)
    assert gallery.metainfo == {**common, 'languages': ['de'], 'translated_languages': [],
                                'captions_per_image': 4}


def test_media_ids_name_split_seed_size_and_stream_index():
    gallery = SyntheticRetrievalDataset(300, ['en'], seed=3, image_size=16)
    gallery.with_media = False
    ids = gallery.media_ids()
    assert ids == [gallery[index]['media_id'] for index in range(300)]
    # The gallery skips repeated scenes, so its last image comes from a later draw.
    stream_index = gallery.gallery[-1][0]
    assert stream_index > 299
    assert ids[-1] == f'synthetic_val_seed3_px16_{stream_index:06d}'
    assert SyntheticPairDataset(2, [], split='test', seed=0)[1]['media_id'] == \
        'synthetic_test_seed0_px32_000001'


def test_images_are_drawn_from_the_documented_render_stream():
    # docs/data_synthetic.md: scene i's rendering comes from default_rng([seed, split_id, i, 1]).
    pairs = SyntheticPairDataset(3, ['de', 'fr'], split='val', seed=2)
    expected = render_scene(scene_at(2, 'val', 2), 32, np.random.default_rng([2, 1, 2, 1]))
    np.testing.assert_array_equal(pairs[5]['media'].numpy(), expected)
    gallery = SyntheticRetrievalDataset(3, ['en'], split='test', seed=2)
    stream_index, scene = gallery.gallery[2]
    expected = render_scene(scene, 32, np.random.default_rng([2, 2, stream_index, 1]))
    np.testing.assert_array_equal(gallery[2]['media'].numpy(), expected)


def test_each_language_draws_its_own_styles_whichever_languages_are_asked_for():
    def target_styles(dataset, lang):
        slot = dataset.languages.index(lang)
        return [captions_in_all_styles(scene_at(0, 'train', scene), lang)[
            dataset.captions_of(scene * len(dataset.languages) + slot)[lang][0]]
            for scene in range(dataset.num_scenes)]

    every = SyntheticPairDataset(30, TARGETS)
    styles = {lang: target_styles(every, lang) for lang in TARGETS}
    assert len({tuple(sequence) for sequence in styles.values()}) == len(TARGETS)
    assert target_styles(SyntheticPairDataset(30, ['zh']), 'zh') == styles['zh']
    assert target_styles(SyntheticPairDataset(30, ['ja', 'fr']), 'fr') == styles['fr']


def test_a_seed_given_as_true_is_refused_as_no_integer():
    """``True`` is no seed: taken as 1, it would silently pick another set than asked for."""
    with pytest.raises(ValueError, match='seed must be a non-negative integer, got True'):
        SyntheticPairDataset(2, [], seed=True)
    with pytest.raises(ValueError, match='seed must be a non-negative integer, got True'):
        SyntheticRetrievalDataset(2, seed=True)
    with pytest.raises(ValueError, match='seed must be a non-negative integer, got True'):
        synthetic_caption_corpus(['de'], num_scenes=2, seed=True)


def test_an_english_target_item_gives_both_its_english_captions():
    pairs = SyntheticPairDataset(2, ['en', 'de'])
    english, german = pairs[2], pairs[3]
    assert english['lang'] == 'en' and german['lang'] == 'de'
    assert pairs.captions_of(2) == {'en': [english['source_text'], english['target_text']]}
    assert pairs.captions_of(3) == {'en': [german['source_text']], 'de': [german['target_text']]}
