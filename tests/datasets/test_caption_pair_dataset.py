"""CaptionPairDataset: one item per (media, source caption, target language)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from xmr.datasets import (
    Annotation,
    CaptionPairDataset,
    MediaRecord,
    MediaSkippedWarning,
    SkippedMedia,
    dump_annotation,
    retrieval_collate,
)

TINY = dict(type='MediaTransform', backbone=None, size=8)


@pytest.fixture
def ann_file(tmp_path):
    ann = Annotation(
        dataset='demo', split='train', media_type='image', languages=['en', 'de'],
        source_lang='en', translation_langs=['de', 'cs'],
        items=[MediaRecord('a', 'a.png', {'en': ['a dog', 'a brown dog'],
                                          'de': ['ein Hund', 'ein brauner Hund']},
                           {'de': ['MT Hund', 'MT brauner Hund'], 'cs': ['MT pes', 'MT hnědý']}),
               MediaRecord('b', 'b.png', {'en': ['a cat'], 'de': ['eine Katze']},
                           {'de': ['MT Katze'], 'cs': ['MT kočka']})])
    for name in ('a', 'b'):
        Image.fromarray(np.zeros((12, 10, 3), dtype=np.uint8)).save(tmp_path / f'{name}.png')
    dump_annotation(ann, tmp_path / 'ann.json')
    return tmp_path / 'ann.json'


def test_a_media_file_named_in_decomposed_unicode_is_reported_with_its_spelling(tmp_path):
    """An annotation's composed 'café.png' and a folder unpacked from a macOS archive, whose
    name is decomposed (NFD): the error named a file a listing shows. Expected: the folder's
    spelling and the fix."""
    import unicodedata

    composed = unicodedata.normalize('NFC', 'café.png')
    decomposed = unicodedata.normalize('NFD', composed)
    Image.fromarray(np.zeros((12, 10, 3), dtype=np.uint8)).save(tmp_path / decomposed)
    dump_annotation(Annotation(dataset='demo', split='test', media_type='image',
                               languages=['fr'], source_lang='fr',
                               items=[MediaRecord('a', composed, {'fr': ['un café']})]),
                    tmp_path / 'ann.json')
    dataset = CaptionPairDataset(tmp_path / 'ann.json', data_root=tmp_path, transform=TINY,
                                 source_only=True)
    with pytest.raises(FileNotFoundError) as info:
        dataset.check_media_exist()
    assert f'the first {tmp_path / composed} ({tmp_path} holds {decomposed!r}' in str(info.value)
    assert 'NFC' in str(info.value)


def test_a_media_path_ending_with_a_carriage_return_is_reported_with_the_folder_s_name(tmp_path):
    """An annotation of one's own written from a list with Windows line endings: the error said
    '..., the first DIR/a.png\\r: check data_root ...', whose carriage return a terminal shows by
    writing the rest of the line over its start, for a file a listing shows."""
    Image.fromarray(np.zeros((12, 10, 3), dtype=np.uint8)).save(tmp_path / 'a.png')
    dump_annotation(Annotation(dataset='demo', split='train', media_type='image',
                               languages=['en'], source_lang='en',
                               items=[MediaRecord('a', 'a.png\r', {'en': ['a dog']})]),
                    tmp_path / 'ann.json')
    dataset = CaptionPairDataset(tmp_path / 'ann.json', data_root=tmp_path, transform=TINY,
                                 source_only=True)
    with pytest.raises(FileNotFoundError) as info:
        dataset.check_media_exist()
    written = str(tmp_path / 'a.png\r')
    assert (f'the first {written!r} ({tmp_path} holds \'a.png\', which the annotation names '
            "'a.png\\r', with whitespace around it") in str(info.value)
    assert '\r' not in str(info.value)


def test_every_translation_is_one_item(ann_file):
    dataset = CaptionPairDataset(ann_file, data_root=ann_file.parent, transform=TINY)
    triples = [(dataset[i]['media_id'], dataset[i]['source_text'], dataset[i]['target_text'],
                dataset[i]['lang']) for i in range(len(dataset))]
    assert triples == [
        ('a', 'a dog', 'MT Hund', 'de'), ('a', 'a dog', 'MT pes', 'cs'),
        ('a', 'a brown dog', 'MT brauner Hund', 'de'), ('a', 'a brown dog', 'MT hnědý', 'cs'),
        ('b', 'a cat', 'MT Katze', 'de'), ('b', 'a cat', 'MT kočka', 'cs')]
    item = dataset[5]
    assert item['index'] == 5 and item['media'].dtype == torch.uint8
    assert tuple(item['media'].shape) == (3, 8, 8)
    assert len(CaptionPairDataset(ann_file, data_root=ann_file.parent, target_langs=['cs'],
                                  transform=TINY)) == 3


def test_human_parallel_captions_and_source_only(ann_file):
    human = CaptionPairDataset(ann_file, data_root=ann_file.parent, target_field='captions',
                               transform=TINY)
    assert [human[i]['target_text'] for i in range(len(human))] == [
        'ein Hund', 'ein brauner Hund', 'eine Katze']
    source = CaptionPairDataset(ann_file, data_root=ann_file.parent, source_only=True,
                                transform=TINY)
    items = [source[i] for i in range(len(source))]
    assert [(i['source_text'], i['target_text'], i['lang']) for i in items] == [
        ('a dog', None, 'en'), ('a brown dog', None, 'en'), ('a cat', None, 'en')]


def test_text_only_items_collate_without_media(ann_file):
    dataset = CaptionPairDataset(ann_file, with_media=False, transform=TINY)
    batch = retrieval_collate([dataset[i] for i in range(4)])
    assert batch['media'] is None and batch['batch_size'] == 4
    assert batch['lang'] == ['de', 'cs', 'de', 'cs']


def test_bad_choices_are_named(ann_file):
    with pytest.raises(ValueError, match=r"has no translations in \['ja'\] language"):
        CaptionPairDataset(ann_file, target_langs=['ja'], transform=TINY)
    with pytest.raises(ValueError, match='source_only items have no target language'):
        CaptionPairDataset(ann_file, source_only=True, target_langs=['de'], transform=TINY)
    with pytest.raises(ValueError, match="on_corrupt must be one of \\('raise', 'skip'\\)"):
        CaptionPairDataset(ann_file, on_corrupt='ignore', transform=TINY)


def test_target_langs_written_as_one_string_is_named(ann_file):
    with pytest.raises(ValueError, match=r"target_langs='de' is one string: give a list"):
        CaptionPairDataset(ann_file, target_langs='de', transform=TINY)


def test_an_empty_target_langs_is_named_where_the_file_has_translations(ann_file):
    with pytest.raises(ValueError, match=r"target_langs is empty; name some of \['de', 'cs'\], "
                       r'or set source_only=True'):
        CaptionPairDataset(ann_file, target_langs=[], transform=TINY)


def test_a_text_only_annotation_has_no_media_paths_and_yields_text_pairs(tmp_path):
    ann = Annotation(dataset='multi30k', split='train', media_type='text', languages=['en'],
                     source_lang='en', translation_langs=['de'],
                     items=[MediaRecord('p0', None, {'en': ['two dogs run']},
                                        {'de': ['zwei Hunde rennen']}),
                            MediaRecord('p1', None, {'en': ['a man sings']},
                                        {'de': ['ein Mann singt']})])
    dump_annotation(ann, tmp_path / 'pairs.json')
    assert 'media_path' not in (tmp_path / 'pairs.json').read_text()
    dataset = CaptionPairDataset(tmp_path / 'pairs.json')  # no media root, nothing to read
    assert [(dataset[i]['source_text'], dataset[i]['target_text'], dataset[i]['media'])
            for i in range(2)] == [('two dogs run', 'zwei Hunde rennen', None),
                                   ('a man sings', 'ein Mann singt', None)]
    assert retrieval_collate([dataset[0], dataset[1]])['media'] is None


def test_media_paths_are_required_with_media_and_refused_without(tmp_path):
    from xmr.datasets import AnnotationError

    record = MediaRecord('p0', 'p0.jpg', {'en': ['two dogs run']})
    with pytest.raises(AnnotationError, match="item 0: media_path 'p0.jpg' in a text-only "
                                              "annotation \\(media_type 'text'\\); remove it"):
        Annotation(dataset='d', split='s', media_type='text', languages=['en'],
                   items=[record]).validate()
    with pytest.raises(AnnotationError, match=r"item 0 lacks \['media_path'\], which an "
                                              'annotation of images needs'):
        Annotation(dataset='d', split='s', media_type='image', languages=['en'],
                   items=[MediaRecord('p0', None, {'en': ['two dogs run']})]).validate()
    with pytest.raises(AnnotationError, match='item 0: media_path must be a non-empty string'):
        Annotation(dataset='d', split='s', media_type='image', languages=['en'],
                   items=[MediaRecord('p0', ' ', {'en': ['two dogs run']})]).validate()


def test_missing_media_files_are_found_in_one_listing_before_training(ann_file, monkeypatch):
    """The training loop calls ``check_media_exist`` before the first step; read, the missing
    file would stop training at a random iteration."""
    from xmr.datasets import base

    (ann_file.parent / 'b.png').unlink()
    dataset = CaptionPairDataset(ann_file, data_root=ann_file.parent, transform=TINY)
    with pytest.raises(FileNotFoundError, match=(
            f'{ann_file}: 1 of its 2 media files are missing, the first '
            f'{ann_file.parent / "b.png"}: check data_root and data_prefix, or set '
            "on_corrupt='skip' to leave them out")):
        dataset.check_media_exist()
    said = []
    monkeypatch.setattr(base, 'print_log', lambda message, **_: said.append(message))
    CaptionPairDataset(ann_file, data_root=ann_file.parent, transform=TINY,
                       on_corrupt='skip').check_media_exist()
    assert said == [f'{ann_file}: 1 of its 2 media files are missing, the first '
                    f"{ann_file.parent / 'b.png'}: check data_root and data_prefix; they are "
                    "skipped (on_corrupt='skip')"]
    CaptionPairDataset(ann_file, data_root=ann_file.parent, transform=TINY,
                       with_media=False).check_media_exist()  # reads no file


@pytest.mark.parametrize('english, german', [(['a dog'], ['ein Hund', 'ein brauner Hund']),
                                             (['a dog', 'a brown dog'], ['ein Hund'])],
                         ids=['more', 'fewer'])
def test_parallel_captions_refuse_a_record_with_more_target_captions(tmp_path, english, german):
    """Pairing the k-th source caption with the k-th target caption needs equal counts: extra
    target captions would be dropped silently, missing ones read past the list's end."""
    ann = Annotation(dataset='demo', split='train', media_type='text', languages=['en', 'de'],
                     source_lang='en',
                     items=[MediaRecord('a', None, {'en': english, 'de': german})])
    dump_annotation(ann, tmp_path / 'ann.json')
    with pytest.raises(ValueError, match=f"{len(english)} en and {len(german)} de captions; "
                       "target_field='captions'"):
        CaptionPairDataset(tmp_path / 'ann.json', target_field='captions')


def test_source_to_target_text_is_the_items_own_caption_translation(ann_file):
    dataset = CaptionPairDataset(ann_file, data_root=ann_file.parent, target_langs=['de'],
                                 translated_texts=['source_to_target'], with_media=False,
                                 transform=TINY)
    assert [(dataset[i]['source_text'], dataset[i]['source_to_target_text'])
            for i in range(len(dataset))] == [
        ('a dog', 'MT Hund'), ('a brown dog', 'MT brauner Hund'), ('a cat', 'MT Katze')]


def test_missing_pairs_say_how_to_get_them(ann_file):
    """A Multi30K train file prepared without --translations had no word on the way out."""
    with pytest.raises(ValueError, match=(
            r"has no translations in \['ja'\] language; it has \['de', 'cs'\]: attach them with "
            r"tools/data/attach_translations.py \(docs/data.md\), or pair parallel human "
            r"captions with target_field='captions'$")):
        CaptionPairDataset(ann_file, target_langs=['ja'], transform=TINY)
    with pytest.raises(ValueError, match=r"has no captions in \['ja'\] language; it has .*: "
                       'drop them from target_langs$'):
        CaptionPairDataset(ann_file, target_langs=['ja'], target_field='captions',
                           transform=TINY)


def test_an_annotation_without_source_lang_is_refused_naming_the_file(tmp_path):
    dump_annotation(Annotation(dataset='demo', split='test', media_type='text',
                               languages=['en', 'de'],
                               items=[MediaRecord('a', None, {'en': ['a dog'],
                                                              'de': ['ein Hund']})]),
                    tmp_path / 'ann.json')
    with pytest.raises(ValueError, match=f'{tmp_path / "ann.json"} names no source_lang; '
                       'training pairs need one'):
        CaptionPairDataset(tmp_path / 'ann.json', target_field='captions')


@pytest.mark.parametrize('field', ['back_translations', 'caption'])
def test_a_target_field_other_than_translations_or_captions_is_refused_naming_it(ann_file, field):
    with pytest.raises(ValueError, match=r"target_field must be one of \('translations', "
                       rf"'captions'\), got '{field}'"):
        CaptionPairDataset(ann_file, target_field=field, transform=TINY)


def test_source_only_items_refuse_translated_texts(ann_file):
    with pytest.raises(ValueError, match='source_only items have no target language to '
                       'translate; drop translated_texts'):
        CaptionPairDataset(ann_file, source_only=True, translated_texts=['source_to_target'],
                           with_media=False, transform=TINY)


def test_item_languages_are_positions_in_target_langs_and_minus_one_without_targets(ann_file):
    pairs = CaptionPairDataset(ann_file, with_media=False, transform=TINY)
    assert pairs.item_languages().tolist() == [0, 1, 0, 1, 0, 1]
    source = CaptionPairDataset(ann_file, source_only=True, with_media=False, transform=TINY)
    assert source.item_languages().dtype == np.int16
    assert source.item_languages().tolist() == [-1, -1, -1]


def test_a_record_of_hundreds_of_captions_pairs_each_with_its_own(tmp_path):
    english = [f'dog {k}' for k in range(300)]
    german = [f'Hund {k}' for k in range(300)]
    dump_annotation(Annotation(dataset='demo', split='train', media_type='text',
                               languages=['en', 'de'], source_lang='en',
                               items=[MediaRecord('a', None, {'en': ['a cat'], 'de': ['Katze']}),
                                      MediaRecord('b', None, {'en': english, 'de': german})]),
                    tmp_path / 'ann.json')
    dataset = CaptionPairDataset(tmp_path / 'ann.json', target_field='captions')
    assert [(dataset[i]['source_text'], dataset[i]['target_text'])
            for i in range(len(dataset))] == [('a cat', 'Katze'), *zip(english, german)]


def test_an_unreadable_image_under_skip_gives_the_items_marker(ann_file):
    (ann_file.parent / 'b.png').write_bytes(b'not a png')
    dataset = CaptionPairDataset(ann_file, data_root=ann_file.parent, transform=TINY,
                                 on_corrupt='skip')
    with pytest.warns(MediaSkippedWarning, match='skipping item 5: '):
        marker = dataset[5]
    assert isinstance(marker, SkippedMedia)
    assert (marker.index, marker.media_path) == (5, str(ann_file.parent / 'b.png'))
    assert dataset[3]['media_id'] == 'a'
