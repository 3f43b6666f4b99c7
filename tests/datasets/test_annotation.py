"""The annotation schema: round trip, validation messages, atomic writes."""
from __future__ import annotations

import gc
import json
import re
import tracemalloc
from dataclasses import replace

import pytest

import xmr.datasets.annotation as annotation_module
from tests.conftest import REPO
from xmr.datasets.annotation import (
    Annotation,
    AnnotationError,
    MediaRecord,
    annotation_writer,
    dump_annotation,
    load_annotation,
    written_header,
)
from xmr.datasets.record_store import RecordStore


def _annotation(**overrides) -> Annotation:
    fields = dict(
        dataset='demo', split='train', media_type='image', languages=['en', 'cs'],
        source_lang='en', translation_langs=['ja'],
        items=[MediaRecord('a', 'a.jpg', {'en': ['A dog.', 'A brown dog.'],
                                          'cs': ['Pes v oranžovém obojku.']},
                           {'ja': ['犬。', '茶色の犬。']}),
               MediaRecord('b', 'sub/b.jpg', {'en': ['A cat.'], 'cs': ['Kočka.']},
                           {'ja': ['猫。']})])
    fields.update(overrides)
    return Annotation(**fields)


def test_the_header_of_a_written_file_is_read_without_its_items(tmp_path):
    ann = _annotation()
    dump_annotation(ann, tmp_path / 'a.json')
    assert written_header(tmp_path / 'a.json') == ann.header_json()
    (tmp_path / 'other.json').write_text('{"items": []}')
    assert written_header(tmp_path / 'other.json') == {}
    assert written_header(tmp_path / 'missing.json') == {}


def test_round_trip_keeps_every_field_and_non_ascii_bytes(tmp_path):
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(), path)
    assert 'oranžovém'.encode() in path.read_bytes()
    assert '茶色の犬'.encode() in path.read_bytes()
    assert load_annotation(path) == _annotation()


def test_a_file_saved_with_a_byte_order_mark_loads(tmp_path):
    """Windows editors write UTF-8 with a BOM; json refuses one, the caption files' reader
    (read_lines) drops it, and so does the annotation loader."""
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(), path)
    path.write_bytes(b'\xef\xbb\xbf' + path.read_bytes())
    assert load_annotation(path) == _annotation()


@pytest.mark.parametrize('threshold, full_collections', [(1_000, 1), (10**9, 0)])
def test_loading_pauses_the_collector_and_walks_the_heap_only_after_a_large_file(
        tmp_path, monkeypatch, threshold, full_collections):
    """The collector walked the millions of new objects of a 3M-caption file again and again
    while they were parsed (1.6x the load time); the annotation holds no reference cycle. The
    full collection that ended every load cost 0.4 s on a heap holding torch and transformers
    (183 s of the 266 s that tests/datasets took): a file of fewer new objects than
    ``FULL_COLLECTION_AFTER`` (these 3,000 items make some 21,000) goes without."""
    monkeypatch.setattr(annotation_module, 'FULL_COLLECTION_AFTER', threshold)
    items = [MediaRecord(f'{i}', f'{i}.jpg', {'en': [f'caption {i}'], 'cs': [f'popisek {i}']},
                         {'ja': [f'キャプション {i}']}) for i in range(3000)]
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(items=items), path)
    passes = []

    def count(phase, info):
        passes.append((phase, info['generation']))

    expected = _annotation(items=items)
    gc.collect()
    gc.callbacks.append(count)
    try:
        loaded = load_annotation(path)
        assert gc.isenabled()
        after_enabled_load = len(passes)
        gc.disable()
        load_annotation(path)
        assert not gc.isenabled()
    finally:
        gc.callbacks.remove(count)
        gc.enable()
    starts = [generation for phase, generation in passes if phase == 'start']
    # At most the one that ends the load, not one per 700 new objects; none while disabled.
    assert len(starts) <= 1 and len(passes) == after_enabled_load
    assert starts.count(2) == full_collections
    assert loaded == expected


def test_files_are_written_by_the_c_encoder_one_item_a_line(tmp_path, monkeypatch):
    """json's pure-Python encoder (any indent) held a string per token of the file until it
    joined them (1.1 GB and 5.7 s for CC300K's 1 GB annotation); the file holds the same JSON."""
    import json.encoder

    def pure_python_encoder(*args, **kwargs):
        raise AssertionError("json's pure-Python encoder ran")

    monkeypatch.setattr(json.encoder, '_make_iterencode', pure_python_encoder)
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(), path)
    text = path.read_text(encoding='utf-8')
    assert len(text.splitlines()) == len(_annotation().items) + 2
    assert json.loads(text) == _annotation().to_json()
    assert load_annotation(path) == _annotation()


def test_a_file_is_written_as_it_is_made_never_held_whole(tmp_path):
    """The file's text was made whole before it was written: each item's line, their join and
    the join copied into the header's line, 4.4 times the file beside the annotation (2.5 GB
    for CC3M's with one translation)."""
    items = [MediaRecord(f'{i}', f'{i}.jpg', {'en': [f'A dog runs across the grass {i}.'] * 5,
                                              'cs': [f'Pes běží přes trávu {i}.'] * 5},
                         {'ja': [f'犬が草の上を走っている {i}。'] * 5}) for i in range(2000)]
    ann = _annotation(items=items)
    path = tmp_path / 'ann.json'
    tracemalloc.start()
    try:
        dump_annotation(ann, path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < path.stat().st_size
    assert load_annotation(path) == ann


def test_loader_names_file_item_and_key(tmp_path):
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(), path)
    data = json.loads(path.read_text(encoding='utf-8'))
    del data['items'][1]['captions']['cs']
    path.write_text(json.dumps(data), encoding='utf-8')
    with pytest.raises(AnnotationError, match=r"ann\.json: item 1 \(media_id 'b'\): captions "
                                              r"must have exactly the languages \['en', 'cs'\]"):
        load_annotation(path)


@pytest.mark.parametrize(('change', 'message'), [
    (dict(items=[MediaRecord('a', 'a.jpg', {'en': ['x'], 'cs': ['y']}, {'ja': ['1', '2']})]),
     r"translations\['ja'\] has 2 entries but captions\['en'\] has 1"),
    (dict(items=[MediaRecord('a', 'a.jpg', {'en': ['x'], 'cs': ['']}, {'ja': ['1']})]),
     r"captions\['cs'\]\[0\] must be a non-empty string"),
    (dict(items=[MediaRecord('a', 'a.jpg', {'en': ['x'], 'cs': [' \t ']}, {'ja': ['1']})]),
     r"captions\['cs'\]\[0\] must be a non-empty string"),
    # Invisible alone, as the tokenizers drop them: a zero-width space, a byte order mark with
    # a no-break space, a word joiner and a soft hyphen. They passed as captions.
    (dict(items=[MediaRecord('a', 'a.jpg', {'en': ['x'], 'cs': ['\u200b']}, {'ja': ['1']})]),
     r"captions\['cs'\]\[0\] must be a non-empty string, got '\\u200b'"),
    (dict(items=[MediaRecord('a', 'a.jpg', {'en': ['x'], 'cs': ['y']}, {'ja': ['\ufeff\xa0']})]),
     r"translations\['ja'\]\[0\] must be a non-empty string"),
    (dict(items=[MediaRecord('a', 'a.jpg', {'en': [' \u2060\xad '], 'cs': ['y']},
                             {'ja': ['1']})]),
     r"captions\['en'\]\[0\] must be a non-empty string"),
    (dict(items=[MediaRecord('a', 'a.jpg', {'en': ['x'], 'cs': ['y']}, {'ja': ['1']}),
                 MediaRecord('a', 'b.jpg', {'en': ['x'], 'cs': ['y']}, {'ja': ['1']})]),
     r"item 1: media_id 'a' repeats item 0"),
    (dict(languages=['en', 'Czech']), r"languages: unknown language code 'Czech'"),
    (dict(media_type='audio'),
     r"media_type must be one of \('image', 'video', 'text'\), got 'audio'"),
    (dict(source_lang=None), 'translation_langs is set but source_lang is missing'),
    (dict(source_lang='de'), "source_lang 'de' is not one of the caption languages"),
    (dict(items=[]), 'the file holds no items'),
    (dict(languages=[]), r'languages must be a non-empty list of language codes, got \[\]'),
    (dict(languages=['en', 'jp']), r"languages holds 'jp'; write its canonical code 'ja'"),
    (dict(languages=['en', 'cs', 'en']), r"languages lists a language twice: \['en', 'cs', 'en'\]"),
    (dict(media_type='text'), r"item 0: media_path 'a.jpg' in a text-only annotation"),
    (dict(items=[MediaRecord('a', 'a.jpg', {'en': ['x'], 'cs': ['y'], 'de': ['z']},
                             {'ja': ['1']})]),
     r"captions must have exactly the languages \['en', 'cs'\], found \['cs', 'de', 'en'\]"),
    (dict(items=[MediaRecord('a', 'a.jpg', {'en': ['x', 'x2'], 'cs': ['y']}, {'ja': ['1']})]),
     r"translations\['ja'\] has 1 entries but captions\['en'\] has 2"),
    # A control character alone (DEL) shows nothing either.
    (dict(items=[MediaRecord('a', 'a.jpg', {'en': ['x'], 'cs': ['\x7f']}, {'ja': ['1']})]),
     r"captions\['cs'\]\[0\] must be a non-empty string"),
    (dict(back_translation_langs=['en']),
     r"back_translation_langs \['en'\] must be caption languages other than the source 'en'"),
    (dict(back_translation_langs=['de']),
     r"back_translation_langs \['de'\] must be caption languages other than the source"),
    (dict(source_lang=None, translation_langs=[], back_translation_langs=['cs']),
     'back_translation_langs is set but source_lang is missing'),
    (dict(back_translation_langs=['cs']),
     r"back_translations must have exactly the languages \['cs'\], found \[\]"),
])
def test_validation_rejects(change, message):
    with pytest.raises(AnnotationError, match=message):
        _annotation(**change).validate('origin.json')


@pytest.mark.parametrize('text', ['\ufeffDva mladí muži', '\u200b…', '«Ano»', '\u200d😀',
                                  '1 dog', '¿Qué?', 'ngôi nhà'])
def test_a_caption_showing_anything_passes_whatever_it_opens_with(text):
    _annotation(items=[MediaRecord('a', 'a.jpg', {'en': ['x'], 'cs': [text]},
                                   {'ja': ['1']})]).validate('origin.json')


def test_half_an_emoji_is_refused_where_it_stands_before_a_tokenizer_or_a_write_meets_it(
        tmp_path):
    # '\\ud83d' alone is the first half of the UTF-16 pair of an emoji (a string cut between the
    # halves): valid JSON, no text. Loaded, it stopped a Hugging Face tokenizer mid-training
    # ('TextInputSequence must be str') and a write with a temporary file left behind.
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(), path)
    path.write_text(path.read_text(encoding='utf-8').replace('Kočka.', 'Kočka \\ud83d'),
                    encoding='utf-8')
    message = (r"item 1 \(media_id 'b'\): captions\['cs'\]\[0\] holds '\\ud83d' at "
               r'character 6, half of a UTF-16 surrogate pair')
    with pytest.raises(AnnotationError, match=message):
        load_annotation(path)
    half = _annotation(items=[MediaRecord('b', 'b.jpg', {'en': ['A cat.'], 'cs': ['Kočka \ud83d']},
                                          {'ja': ['猫。']})])
    with pytest.raises(AnnotationError, match=r"captions\['cs'\]\[0\] holds '\\ud83d'"):
        dump_annotation(half, tmp_path / 'out.json')
    assert sorted(p.name for p in tmp_path.iterdir()) == ['ann.json']


@pytest.mark.parametrize('key', ['media_id', 'media_path'])
def test_a_name_that_is_no_unicode_text_is_refused_naming_the_item_and_key(tmp_path, key):
    """A media file named in Latin-1 ('caf\\xe9.jpg') is listed by Python with the byte as
    the surrogate '\\udce9' (surrogateescape): no text, so no UTF-8 file can hold it. A write
    stopped with a bare UnicodeEncodeError naming no item; a file holding it as a JSON escape
    loaded. Expected: refused on dump and on load, naming the item and key."""
    record = MediaRecord('b', 'b.jpg', {'en': ['A cat.'], 'cs': ['Kočka.']}, {'ja': ['猫。']})
    latin1 = _annotation(items=[replace(record, **{key: 'caf\udce9'})])
    message = rf"item 0: {key} 'caf\\udce9' holds '\\udce9' at character 3"
    with pytest.raises(AnnotationError, match=message):
        dump_annotation(latin1, tmp_path / 'out.json')
    assert list(tmp_path.iterdir()) == []
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(items=[record]), path)
    escaped = json.dumps(record.to_json()[key])
    path.write_text(path.read_text(encoding='utf-8').replace(escaped, '"caf\\udce9"'),
                    encoding='utf-8')
    with pytest.raises(AnnotationError, match=message):
        load_annotation(path)


def test_foreign_json_is_rejected_with_a_hint(tmp_path):
    path = tmp_path / 'dataset_coco.json'
    path.write_text(json.dumps({'images': []}), encoding='utf-8')
    with pytest.raises(AnnotationError, match='prepare_<dataset>.py'):
        load_annotation(path)


def _back_translated(cs_captions: list[str], back_translations: list[str]) -> Annotation:
    return _annotation(back_translation_langs=['cs'], items=[
        MediaRecord('a', 'a.jpg', {'en': ['A dog.'], 'cs': cs_captions}, {'ja': ['犬。']},
                    {'cs': back_translations})])


def test_back_translations_are_one_per_caption_of_their_own_language(tmp_path):
    """Two Czech captions beside one English one take two back-translations (of the Czech
    captions, into English), and survive the file."""
    ann = _back_translated(['Pes.', 'Hnědý pes.'], ['A dog.', 'A brown dog.'])
    dump_annotation(ann, tmp_path / 'ann.json')
    assert load_annotation(tmp_path / 'ann.json') == ann
    with pytest.raises(AnnotationError, match=r"back_translations\['cs'\] has 1 entries but "
                                              r"captions\['cs'\] has 2; each caption needs "
                                              'exactly one back-translation'):
        _back_translated(['Pes.', 'Hnědý pes.'], ['A dog.']).validate()


def test_a_source_language_alias_is_read_as_its_canonical_code(tmp_path):
    """A file naming its source ``ces`` beside the caption language ``cs`` was refused: the
    source is no caption language until both are canonical."""
    ann = _annotation(source_lang='cs', translation_langs=['ja'], items=[
        MediaRecord('a', 'a.jpg', {'en': ['A dog.'], 'cs': ['Pes.']}, {'ja': ['犬。']})])
    path = tmp_path / 'ann.json'
    dump_annotation(ann, path)
    path.write_text(path.read_text(encoding='utf-8').replace('"source_lang": "cs"',
                                                             '"source_lang": "ces"'),
                    encoding='utf-8')
    assert load_annotation(path) == ann


def test_a_file_of_another_version_is_refused_naming_the_version_read(tmp_path):
    data = _annotation().to_json()
    data['version'] = 2
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(data), encoding='utf-8')
    with pytest.raises(AnnotationError, match=r'ann\.json: version 2 is not supported \(this '
                                              r'xmr reads version 1\)'):
        load_annotation(path)


def test_a_missing_relative_annotation_is_named_with_the_working_directory(tmp_path,
                                                                           monkeypatch):
    """A config's paths follow the working directory, not the config's folder."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=re.escape(
            f'annotation file not found: data/my_set.json, relative to the working directory '
            f'{tmp_path}: check ann_file')):
        load_annotation('data/my_set.json')


def test_the_header_of_a_written_file_saved_with_a_byte_order_mark_is_read(tmp_path):
    """An editor that saves UTF-8 with a BOM leaves the file a converter's all the same."""
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(), path)
    path.write_bytes(b'\xef\xbb\xbf' + path.read_bytes())
    assert written_header(path) == _annotation().header_json()


@pytest.mark.parametrize('name, made', [
    ('multi30k_train.json', 'multi30k_train.json is written by tools/data/prepare_multi30k.py'),
    ('multi30k_train_100shot_seed42.json', 'is written by tools/data/few_shot_split.py --protocol '
     'subsample'),
    # A config's machine-translated copy (Swahili), which the Multi30K converter never writes.
    ('multi30k_train_sw.json', 'is written by tools/data/attach_translations.py '
     'multi30k_train.json --translations LANG=LANG.txt --out <this file>, LANG.txt the machine '
     'translation, line by line, of what tools/data/export_source_captions.py exports of '
     "prepare_multi30k.py's multi30k_train.json"),
    ('flickr30k_200_test.json', 'is written by tools/data/prepare_flickr30k_200.py'),
    ('coco_test1k_fold3.json', "is written by tools/data/prepare_mscoco.py, or from LAPS's "
     'files by tools/data/prepare_laps.py'),
    ('cococn_test.json', 'is written by tools/data/prepare_mscoco.py'),
    ('my_set.json', 'a raw release is converted by tools/data/prepare_<dataset>.py'),
])
def test_a_missing_annotation_is_named_with_the_tool_that_writes_it(tmp_path, name, made):
    """The error named the path alone, as the runner built the dataset at training's start."""
    with pytest.raises(FileNotFoundError, match=re.escape(
            f'annotation file not found: {tmp_path / name}: check ann_file and data_root, or '
            f'make it: ') + '.*' + re.escape(f'{made} (docs/data.md, Converters)')):
        load_annotation(tmp_path / name)


def test_each_output_docs_data_md_lists_for_a_converter_is_named_with_that_converter():
    """Each '### <dataset> — `tools/data/<tool>.py`' section's 'Outputs:' names files that
    annotation_writer names with that section's tool (or one of its tools)."""
    page = (REPO / 'docs' / 'data.md').read_text(encoding='utf-8')
    checked = 0
    for section in re.split(r'^### ', page, flags=re.MULTILINE)[1:]:
        heading, _, text = section.partition('\n')
        tools = re.findall(r'`?(?:tools/data/)?(prepare_\w+\.py)`', heading)
        outputs = re.search(r'Outputs?: (.*?)(?:\n\n|$)', text, flags=re.DOTALL)
        if not tools or outputs is None:
            continue
        for name in re.findall(r'`([\w{}.,]+\.json)`', outputs.group(1)):
            name = re.sub(r'\{[^}]*\}', 'x', name)  # {train,val,test}, {N}, {0..4}
            writers = re.findall(r'tools/data/\S+\.py', annotation_writer(name) or '')
            assert set(writers) & {f'tools/data/{tool}' for tool in tools}, name
            checked += 1
    assert checked >= 20


def test_invalid_annotation_writes_nothing(tmp_path):
    path = tmp_path / 'out.json'
    with pytest.raises(AnnotationError):
        dump_annotation(_annotation(items=[]), path)
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / 'out.json'
    path.write_text('old', encoding='utf-8')

    def failing_replace(*args):
        raise OSError('disk full')

    monkeypatch.setattr('xmr.datasets.annotation.os.replace', failing_replace)
    with pytest.raises(OSError, match='disk full'):
        dump_annotation(_annotation(), path)
    assert path.read_text(encoding='utf-8') == 'old'
    assert [p.name for p in tmp_path.iterdir()] == ['out.json']


def test_language_aliases_in_a_file_are_read_as_canonical_codes(tmp_path):
    """A file written with ``jp`` (and ``ces``) as its languages and caption keys loads as ``ja``
    and ``cs`` throughout, so that its captions are found under the canonical codes."""
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(), path)
    text = path.read_text(encoding='utf-8').replace('"cs"', '"ces"').replace('"ja"', '"jp"')
    assert '"jp"' in text and '"ces"' in text
    path.write_text(text, encoding='utf-8')
    assert load_annotation(path) == _annotation()


def test_two_caption_keys_of_one_language_are_refused_not_merged_silently(tmp_path):
    """``cs`` and ``ces`` (like ``ja`` and XTD10's ``jp``) in one item are one language:
    keeping the last key's captions lost the first's without a word."""
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(), path)
    data = json.loads(path.read_text(encoding='utf-8'))
    data['items'][0]['captions']['ces'] = ['Kočka.']
    path.write_text(json.dumps(data, ensure_ascii=False), encoding='utf-8')
    with pytest.raises(AnnotationError, match=r"ann.json: item 0 \(media_id 'a'\): captions has "
                       r"'cs' and 'ces', both the language 'cs'"):
        load_annotation(path)


def test_a_header_written_after_the_items_is_read_as_one_before_them(tmp_path):
    """The items are decoded one at a time as the file is read; keys after them (a writer
    that orders its keys otherwise) are still part of the header."""
    data = _annotation().to_json()
    items = data.pop('items')
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps({'items': items, **data}, ensure_ascii=False), encoding='utf-8')
    assert load_annotation(path) == _annotation()


def test_a_foreign_file_is_named_foreign_before_any_of_its_items_is_faulted(tmp_path):
    """Its items break the schema too, but a file of another format is told to be converted,
    even where its ``format`` comes after the items."""
    path = tmp_path / 'raw.json'
    path.write_text(json.dumps({'items': [{'id': 1}], 'format': 'coco'}), encoding='utf-8')
    with pytest.raises(AnnotationError, match="format must be 'xmr-media-captions', got 'coco'"):
        load_annotation(path)
    data = _annotation().to_json()
    data['items'][1]['extra'] = 1
    path.write_text(json.dumps(data), encoding='utf-8')
    with pytest.raises(AnnotationError, match=r"raw\.json: item 1 has unknown keys \['extra'\]"):
        load_annotation(path)


@pytest.mark.parametrize('misspelt', ['translation_lang', 'back_translations_langs'])
def test_a_misspelt_optional_header_key_is_refused_not_read_as_absent(tmp_path, misspelt):
    """The file loaded with no translations (no back translations) and said nothing."""
    data = _annotation().to_json()
    data[misspelt] = ['de']
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(data), encoding='utf-8')
    with pytest.raises(AnnotationError) as raised:
        load_annotation(path)
    assert str(raised.value) == (
        f"{path}: header has unknown keys ['{misspelt}']; allowed: ['back_translation_langs', "
        "'dataset', 'format', 'items', 'languages', 'media_type', 'source_lang', 'split', "
        "'translation_langs', 'version']")


def test_an_item_without_media_path_is_refused_unless_the_annotation_is_text(tmp_path):
    data = _annotation().to_json()
    del data['items'][1]['media_path']
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(data), encoding='utf-8')
    with pytest.raises(AnnotationError, match=r"ann\.json: item 1 lacks \['media_path'\], which "
                                              'an annotation of images needs'):
        load_annotation(path)
    data['media_type'] = 'text'
    del data['items'][0]['media_path']
    path.write_text(json.dumps(data), encoding='utf-8')
    assert [record.media_path for record in load_annotation(path).items] == [None, None]


@pytest.mark.parametrize('written, twice, message', [
    ('"split": "train"', '"split": "train", "split": "test"',
     "the top-level object holds the key 'split' twice"),
    # json keeps the last of a key given twice: the first 'cs' list would be dropped.
    ('"cs": ["Kočka."]', '"cs": ["Kočka."], "cs": ["Malá kočka."]',
     "items[1]: an object holds the key 'cs' twice"),
], ids=['header', 'captions'])
def test_a_key_given_twice_is_refused_naming_where(tmp_path, written, twice, message):
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(), path)
    path.write_text(path.read_text(encoding='utf-8').replace(written, twice), encoding='utf-8')
    with pytest.raises(AnnotationError) as error:
        load_annotation(path)
    assert str(error.value) == f'{path}: {message}'


def test_a_file_not_in_utf8_is_refused_naming_the_line_and_byte_of_its_first_fault(tmp_path):
    """The file is decoded a chunk (1M characters) at a time: the decoder's position is the
    chunk's, so a fault past the first chunk is located in the file itself."""
    items = [MediaRecord(f'{i}', f'{i}.jpg', {'en': [f'caption {i}'], 'cs': [f'popisek {i}']})
             for i in range(60_000)]
    items[50_000] = replace(items[50_000], captions={'en': ['un café'], 'cs': ['kavárna']})
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(items=items, translation_langs=[]), path)
    data = path.read_bytes().replace('café'.encode(), b'caf\xe9')
    path.write_bytes(data)
    byte = data.index(b'\xe9')
    assert byte > 1 << 21  # past the first chunks
    line = data[:byte].count(b'\n') + 1
    with pytest.raises(AnnotationError) as error:
        load_annotation(path)
    assert str(error.value) == (f"{path}: not UTF-8: invalid bytes b'\\xe9' on line {line}, "
                                f'byte {byte}; save it as UTF-8')


@pytest.mark.parametrize('container', [list, RecordStore])
def test_a_file_of_an_empty_items_array_is_said_to_hold_no_items(tmp_path, container):
    data = _annotation().to_json()
    data['items'] = []
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(data), encoding='utf-8')
    with pytest.raises(AnnotationError, match=r'ann\.json: the file holds no items'):
        load_annotation(path, items=container)


@pytest.mark.parametrize(('item', 'message'), [
    (['a', 'a.jpg'], r'ann\.json: item 1 must be an object, got list'),
    ('a.jpg', r'ann\.json: item 1 must be an object, got str'),
    ({'media_id': 'b', 'media_path': 'b.jpg'}, r"ann\.json: item 1 lacks \['captions'\]"),
    ({'media_path': 'b.jpg', 'captions': {'en': ['x'], 'cs': ['y']}},
     r"ann\.json: item 1 lacks \['media_id'\]"),
])
def test_an_item_of_the_wrong_shape_is_named_with_its_fault(tmp_path, item, message):
    data = _annotation().to_json()
    data['items'][1] = item
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(data), encoding='utf-8')
    with pytest.raises(AnnotationError, match=message):
        load_annotation(path)


@pytest.mark.parametrize(('top', 'message'), [
    ([1, 2], r'ann\.json: the top level must be a JSON object'),
    ('items', r'ann\.json: the top level must be a JSON object'),
    ({'items': {'0': {}}}, r'ann\.json: items must be a list'),
    ({'items': None}, r'ann\.json: items must be a list'),
    ({}, r"ann\.json: header lacks \['items'\]"),
])
def test_a_file_whose_top_level_or_items_is_of_the_wrong_kind_is_refused(tmp_path, top, message):
    if isinstance(top, dict):
        header = _annotation().header_json()
        top = {**header, **top}
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(top), encoding='utf-8')
    with pytest.raises(AnnotationError, match=message):
        load_annotation(path)


@pytest.mark.parametrize('first_item_faulty', [False, True])
def test_a_json_error_among_the_items_is_reported_where_json_loads_reports_it(
        tmp_path, first_item_faulty):
    """Also after an item at fault: the items after it are still decoded, and a file that is no
    JSON is said so rather than its first item faulted."""
    data = _annotation().to_json()
    if first_item_faulty:
        data['items'][0]['extra'] = 1
    text = json.dumps(data).replace('"media_id": "b",', '"media_id": "b"')
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    path = tmp_path / 'ann.json'
    path.write_text(text, encoding='utf-8')
    with pytest.raises(AnnotationError) as error:
        load_annotation(path)
    assert str(error.value) == f'{path}: not a JSON file Python reads: {expected.value}'


def _faulty_annotation(path, item: int, fault: str, lines: int = 2) -> tuple[int, int, int]:
    """Write an annotation of ``lines`` items (one a line, as written) whose item ``item``
    holds ``fault`` for its media_path; the fault's line, column (from 1) and character."""
    items = [MediaRecord(f'{i}', f'{i}.jpg', {'en': [f'caption {i}'], 'cs': [f'popisek {i}']})
             for i in range(lines)]
    dump_annotation(_annotation(items=items, translation_langs=[]), path)
    text = path.read_text(encoding='utf-8').replace(f'"{item}.jpg"', fault)
    path.write_text(text, encoding='utf-8')
    start = text.index(fault)
    return text.count('\n', 0, start) + 1, start - text.rfind('\n', 0, start), start


@pytest.mark.parametrize('lines', [2, 60_000], ids=['first chunk', 'past the first chunks'])
def test_an_integer_longer_than_python_reads_is_refused_naming_its_line_and_column(
        tmp_path, lines):
    """Python converts at most 4300 digits: json raised a bare ValueError ('Exceeds the limit
    (4300 digits) for integer string conversion') naming neither the file nor the place."""
    path = tmp_path / 'ann.json'
    line, column, char = _faulty_annotation(path, lines - 1, '-' + '7' * 5000, lines)
    assert char > 1 << 21 or lines == 2  # past the first chunks: the window's place is moved
    with pytest.raises(AnnotationError) as error:
        load_annotation(path)
    assert str(error.value) == (
        f'{path}: not a JSON file Python reads: an integer of 5000 digits, more than the 4300 '
        f'Python reads: write it as a string: line {line} column {column} (char {char})')


@pytest.mark.parametrize('where', ['item', 'header'])
def test_arrays_nested_deeper_than_json_follows_are_refused_naming_the_deepest_place(
        tmp_path, where):
    """'[' * 100000 raised a bare RecursionError, naming neither the file nor the place."""
    path = tmp_path / 'ann.json'
    nested = '[' * 100_000 + ']' * 100_000
    if where == 'item':
        line, column, _ = _faulty_annotation(path, 1, nested)
        # The item is decoded alone: its object is the first level.
        deepest, column = 100_001, column + 100_000 - 1
    else:
        dump_annotation(_annotation(), path)
        path.write_text(path.read_text(encoding='utf-8').replace(
            '{"format"', '{"nested": ' + nested + ', "format"', 1), encoding='utf-8')
        line, deepest, column = 1, 100_000, len('{"nested": ') + 100_000
    with pytest.raises(AnnotationError, match=re.escape(
            f'{path}: not a JSON file Python reads: a value nesting arrays and objects {deepest} '
            "levels deep, deeper than Python's JSON reader follows: "
            f'line {line} column {column} ')):
        load_annotation(path)


@pytest.mark.parametrize('fault', ['7' * 5000, '[' * 100_000 + ']' * 100_000])
def test_a_header_line_no_json_reader_takes_is_no_written_header(tmp_path, fault):
    """A number too long, or nesting too deep, on the first line: a bare ValueError or
    RecursionError escaped, where any other fault is a header dump_annotations did not write."""
    path = tmp_path / 'a.json'
    dump_annotation(_annotation(), path)
    path.write_text(path.read_text(encoding='utf-8').replace('"version": 1', f'"version": {fault}'),
                    encoding='utf-8')
    assert written_header(path) == {}


@pytest.mark.parametrize('key', ['media_id', 'media_path'])
def test_a_name_holding_a_nul_is_refused_on_load_naming_the_item_and_key(tmp_path, key):
    """A JSON '\\u0000' in a name loaded, and the dataset later stopped reading the file with a
    bare 'embedded null byte', naming neither the file nor the item."""
    record = MediaRecord('b', 'b.jpg', {'en': ['A cat.'], 'cs': ['Kočka.']}, {'ja': ['猫。']})
    path = tmp_path / 'ann.json'
    dump_annotation(_annotation(items=[record]), path)
    escaped = json.dumps(record.to_json()[key])
    path.write_text(path.read_text(encoding='utf-8').replace(escaped, '"b\\u0000.jpg"'),
                    encoding='utf-8')
    with pytest.raises(AnnotationError,
                       match=rf"item 0: {key} 'b\\x00.jpg' holds a NUL character at character 1"):
        load_annotation(path)
