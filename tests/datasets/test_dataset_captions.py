"""A config's dataset read for its captions alone: annotation records, synthetic sets."""
from __future__ import annotations

import gzip

import pytest

from tests.datasets.test_retrieval_dataset import TINY, multi30k_test  # noqa: F401 (fixture)
from xmr.datasets.dataset_captions import NoCaptions, dataset_captions, split_dataset
from xmr.datasets.synthetic.dataset import SyntheticPairDataset, SyntheticRetrievalDataset


def test_an_annotation_s_captions_are_its_records_in_order_without_its_images(
        multi30k_test, shared_data):  # noqa: F811 (the imported fixture)
    cfg = dict(test_dataloader=dict(dataset=dict(
        type='RetrievalDataset', data_root=str(multi30k_test),
        ann_file='annotations/multi30k_test.json', data_prefix=dict(media='images'),
        languages=['cs'], transform=TINY)))
    dataset = split_dataset(cfg, 'test', 'cfg.py')  # three of its 1,000 images stand
    with gzip.open(shared_data / 'multi30k' / 'raw' / 'test_2016_flickr.cs.gz', 'rt',
                   encoding='utf-8') as lines:
        raw = lines.read().splitlines()
    assert dataset_captions(dataset, 'cs') == raw
    assert dataset_captions(dataset, 'cs', 7) == raw[:7]
    assert dataset_captions(dataset, 'ja') == []


def test_synthetic_sets_give_the_captions_their_items_carry():
    pairs = SyntheticPairDataset(num_scenes=3, languages=['de', 'zh'])
    items = [pairs[i] for i in range(len(pairs))]
    assert dataset_captions(pairs, 'en') == [item['source_text'] for item in items]
    assert dataset_captions(pairs, 'zh') == [item['target_text'] for item in items
                                             if item['lang'] == 'zh']
    english_only = SyntheticPairDataset(num_scenes=2, languages=[])
    assert dataset_captions(english_only, 'en') == [english_only[i]['source_text']
                                                    for i in range(2)]
    gallery = SyntheticRetrievalDataset(num_scenes=4, languages=['en', 'de'], split='test')
    assert dataset_captions(gallery, 'de', 5) == [caption for i in range(4)
                                                  for caption in gallery[i]['captions']['de']][:5]


def test_a_split_without_one_loader_and_a_dataset_without_captions_are_named():
    with pytest.raises(NoCaptions, match='^config cfg.py has no single val_dataloader to take '
                                         'captions from$'):
        split_dataset(dict(val_dataloader=[dict(dataset={}), dict(dataset={})]), 'val', 'cfg.py')
    with pytest.raises(NoCaptions, match='^list exposes neither annotation records nor '
                                         'captions_of$'):
        dataset_captions([], 'de')


def test_back_translations_are_read_from_the_records_alone():
    """``field='back_translations'`` reads each record's machine translations into the source
    language; a synthetic set has none to read and is named."""
    from types import SimpleNamespace

    from xmr.datasets.annotation import MediaRecord

    records = [MediaRecord('a', 'a.jpg', {'de': ['ein Hund']},
                              back_translations={'de': ['a dog']}),
               MediaRecord('b', 'b.jpg', {'de': ['zwei Katzen', 'Katzen']},
                              back_translations={'de': ['two cats', 'cats']})]
    dataset = SimpleNamespace(records=records)
    assert dataset_captions(dataset, 'de') == ['ein Hund', 'zwei Katzen', 'Katzen']
    assert dataset_captions(dataset, 'de', field='back_translations') == [
        'a dog', 'two cats', 'cats']
    gallery = SyntheticRetrievalDataset(num_scenes=2, languages=['en', 'de'], split='test')
    with pytest.raises(NoCaptions, match='^SyntheticRetrievalDataset exposes no annotation '
                                         'records to read back_translations from$'):
        dataset_captions(gallery, 'de', field='back_translations')


def test_a_cached_gallery_gives_the_captions_of_the_dataset_it_caches(tmp_path):
    """A validation or test gallery wrapped in a ``CachedFeatureDataset`` (its features cached
    by ``FeatureCacheHook``) exposes neither records nor ``captions_of``: its captions went
    uncounted by ``tools/test.py`` and the phase report, and ``tools/caption_tokens.py`` said
    the config had none."""
    from xmr.engine.feature_cache import CachedFeatureDataset

    gallery = dict(type='SyntheticRetrievalDataset', num_scenes=3, languages=['en', 'de'],
                   split='val', image_size=32, seed=0, captions_per_image=2)
    cached = CachedFeatureDataset(gallery, cache_dir=str(tmp_path / 'cache'))
    plain = SyntheticRetrievalDataset(**{k: v for k, v in gallery.items() if k != 'type'})
    expected = [caption for i in range(3) for caption in plain[i]['captions']['de']]
    assert len(expected) == 6
    assert dataset_captions(cached, 'de') == expected
    with pytest.raises(NoCaptions, match='^SyntheticRetrievalDataset exposes no annotation '
                                         'records to read back_translations from$'):
        dataset_captions(cached, 'de', field='back_translations')


def test_a_gallery_s_translated_languages_are_read_as_its_queries_are(tmp_path):
    """A language queried with the file's machine translations (translated_languages, a new
    language without human test captions) read as none: caption_tokens said 'no captions in:
    sw', the test's cut/unknown note left it out, visualize_features found '0 sw captions'."""
    from xmr.datasets.annotation import Annotation, MediaRecord, dump_annotation
    from xmr.datasets.retrieval import RetrievalDataset

    dump_annotation(Annotation(
        dataset='my_set', split='test', media_type='image', languages=['en'],
        source_lang='en', translation_langs=['sw'], items=[
            MediaRecord('a', 'a.jpg', {'en': ['a dog runs']}, {'sw': ['mbwa anakimbia']}),
            MediaRecord('b', 'b.jpg', {'en': ['two cats']}, {'sw': ['paka wawili']})]),
        tmp_path / 'test.json')
    gallery = RetrievalDataset(ann_file=str(tmp_path / 'test.json'), languages=['en'],
                               translated_languages=['swh_Latn'], with_media=False)
    assert dataset_captions(gallery, 'sw') == ['mbwa anakimbia', 'paka wawili']
    assert dataset_captions(gallery, 'en', 1) == ['a dog runs']
    assert [gallery.captions_of(i) for i in range(2)] == [
        {'en': ['a dog runs'], 'sw': ['mbwa anakimbia']},
        {'en': ['two cats'], 'sw': ['paka wawili']}]
