"""Back-translations in the annotation, and datasets that carry machine translations along."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from xmr.datasets import (
    Annotation,
    AnnotationError,
    CaptionPairDataset,
    MediaRecord,
    RetrievalDataset,
    dump_annotation,
    load_annotation,
)

TINY = dict(type='MediaTransform', backbone=None, size=8)


def _annotation(**overrides) -> Annotation:
    fields = dict(
        dataset='xtd10', split='train', media_type='image', languages=['en', 'de', 'fr'],
        source_lang='en', translation_langs=['de', 'fr'], back_translation_langs=['de'],
        items=[
            MediaRecord('a', 'a.jpg', {'en': ['a dog'], 'de': ['ein Hund'], 'fr': ['un chien']},
                        {'de': ['MT ein Hund'], 'fr': ['MT un chien']},
                        {'de': ['BT a dog']}),
            MediaRecord('b', 'b.jpg', {'en': ['a cat'], 'de': ['eine Katze'],
                                       'fr': ['un chat']},
                        {'de': ['MT eine Katze'], 'fr': ['MT un chat']},
                        {'de': ['BT a cat']})])
    fields.update(overrides)
    return Annotation(**fields)


@pytest.fixture
def ann_file(tmp_path):
    dump_annotation(_annotation(), tmp_path / 'ann.json')
    return tmp_path / 'ann.json'


def test_back_translations_round_trip(ann_file):
    assert load_annotation(ann_file) == _annotation()
    data = json.loads(ann_file.read_text(encoding='utf-8'))
    assert data['back_translation_langs'] == ['de']
    assert data['items'][1]['back_translations'] == {'de': ['BT a cat']}


@pytest.mark.parametrize(('change', 'message'), [
    (dict(back_translation_langs=['en']), r"back_translation_langs \['en'\] must be caption "
                                          r"languages other than the source 'en'"),
    (dict(back_translation_langs=['cs']), r"back_translation_langs \['cs'\] must be caption"),
    (dict(back_translation_langs=['fr']), r"back_translations must have exactly the languages "
                                          r"\['fr'\], found \['de'\]"),
])
def test_inconsistent_back_translations_are_named(change, message):
    with pytest.raises(AnnotationError, match=message):
        _annotation(**change).validate('ann.json')


@pytest.mark.parametrize('german, back_translations', [
    (['ein Hund'], ['BT a dog', 'BT extra']), (['ein Hund', 'ein Tier'], ['BT a dog'])],
    ids=['more', 'fewer'])
def test_back_translations_must_align_with_their_captions(german, back_translations):
    ann = _annotation()
    ann.items[0].captions['de'] = german
    ann.items[0].back_translations['de'] = back_translations
    with pytest.raises(AnnotationError, match=(
            rf"item 0 \(media_id 'a'\): back_translations\['de'\] has {len(back_translations)} "
            rf"entries but captions\['de'\] has {len(german)}")):
        ann.validate('ann.json')


def test_each_caption_carries_its_own_back_translation(tmp_path):
    """Items of a record with two captions: each reads the back-translation at its index."""
    two = MediaRecord('a', 'a.jpg', {'en': ['a dog', 'a brown dog'],
                                     'de': ['ein Hund', 'ein brauner Hund'],
                                     'fr': ['un chien', 'un chien brun']},
                      {'de': ['MT ein Hund', 'MT ein brauner Hund'],
                       'fr': ['MT un chien', 'MT un chien brun']},
                      {'de': ['BT a dog', 'BT a brown dog']})
    dump_annotation(_annotation(items=[two]), tmp_path / 'ann.json')
    dataset = CaptionPairDataset(tmp_path / 'ann.json', target_langs=['de'],
                                 target_field='captions', translated_texts=['target_to_source'],
                                 with_media=False, transform=TINY)
    assert [(dataset[i]['target_text'], dataset[i]['target_to_source_text'])
            for i in range(len(dataset))] == [('ein Hund', 'BT a dog'),
                                              ('ein brauner Hund', 'BT a brown dog')]


def test_pair_items_carry_the_requested_translations(ann_file):
    dataset = CaptionPairDataset(ann_file, target_langs=['de'], target_field='captions',
                                 translated_texts=['source_to_target', 'target_to_source'],
                                 with_media=False, transform=TINY)
    item = dataset[1]
    assert (item['source_text'], item['target_text'], item['lang']) == ('a cat', 'eine Katze',
                                                                         'de')
    assert item['source_to_target_text'] == 'MT eine Katze'
    assert item['target_to_source_text'] == 'BT a cat'
    plain = CaptionPairDataset(ann_file, target_langs=['de'], target_field='captions',
                               with_media=False, transform=TINY)
    assert 'source_to_target_text' not in plain[0] and 'target_to_source_text' not in plain[0]


def test_missing_translations_are_refused_early(ann_file):
    with pytest.raises(ValueError, match=r"no back_translations in \['fr'\] for "
                                         r"translated_texts='target_to_source'.*: attach them "
                                         r'with tools/data/attach_back_translations\.py .*ann\.'
                                         r'json --back-translations LANG=FILE'):
        CaptionPairDataset(ann_file, target_field='captions', translated_texts=[
            'target_to_source'], with_media=False, transform=TINY)
    with pytest.raises(ValueError, match="needs target_field='captions'"):
        CaptionPairDataset(ann_file, target_langs=['de'], translated_texts=['target_to_source'],
                           with_media=False, transform=TINY)
    with pytest.raises(ValueError, match=r"translated_texts \['to_english'\] unknown"):
        CaptionPairDataset(ann_file, translated_texts=['to_english'], with_media=False,
                           transform=TINY)
    with pytest.raises(ValueError, match=r"translated_texts='target_to_source' is one string: "
                                         r"give a list, \['target_to_source'\]"):
        CaptionPairDataset(ann_file, target_field='captions', translated_texts='target_to_source',
                           with_media=False, transform=TINY)


def test_missing_forward_translations_name_the_tool_that_attaches_them(tmp_path):
    ann = _annotation(translation_langs=[])
    ann = replace(ann, items=[replace(item, translations={}) for item in ann.items])
    dump_annotation(ann, tmp_path / 'ann.json')
    with pytest.raises(ValueError, match=r"no translations in \['de'\] for translated_texts="
                                         r"'source_to_target'.*: attach them with tools/data/"
                                         r'attach_translations\.py .*ann\.json --translations '
                                         r'LANG=FILE'):
        CaptionPairDataset(tmp_path / 'ann.json', target_langs=['de'], target_field='captions',
                           translated_texts=['source_to_target'], with_media=False,
                           transform=TINY)


def test_retrieval_items_carry_back_translations(ann_file):
    dataset = RetrievalDataset(ann_file, languages=['en', 'de'], back_translated_languages=['de'],
                               with_media=False, transform=TINY)
    item = dataset[0]
    assert item['captions'] == {'en': ['a dog'], 'de': ['ein Hund']}
    assert item['back_translations'] == {'de': ['BT a dog']}
    assert dataset.metainfo['back_translated_languages'] == ['de']
    assert 'back_translations' not in RetrievalDataset(ann_file, with_media=False,
                                                       transform=TINY)[0]
    with pytest.raises(ValueError, match=r"no \['fr'\] back-translations; it has \['de'\]: "
                                         r'attach them with tools/data/attach_back_translations'
                                         r'\.py .*ann\.json --back-translations LANG=FILE'):
        RetrievalDataset(ann_file, back_translated_languages=['fr'], with_media=False,
                         transform=TINY)


def test_retrieval_items_carry_translated_captions_as_their_language(ann_file):
    dataset = RetrievalDataset(ann_file, languages=['en'], translated_languages=['de'],
                               with_media=False, transform=TINY)
    assert dataset[1]['captions'] == {'en': ['a cat'], 'de': ['MT eine Katze']}
    assert dataset.metainfo['languages'] == ['en', 'de']
    assert dataset.metainfo['translated_languages'] == ['de']
    with pytest.raises(ValueError, match=r"\['de'\] asked for as human and as translated"):
        RetrievalDataset(ann_file, languages=['de'], translated_languages=['de'],
                         with_media=False, transform=TINY)
