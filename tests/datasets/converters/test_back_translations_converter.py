"""Back-translation files: export a language's captions, attach their translations."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from xmr.datasets.annotation import Annotation, MediaRecord, dump_annotation, load_annotation
from xmr.datasets.converters.back_translations import (
    attach_back_translations,
    export_captions,
    main_attach_back,
)
from xmr.datasets.converters.errors import ConversionError


def _ann() -> Annotation:
    return Annotation(dataset='demo', split='test', media_type='image', languages=['en', 'de'],
                      source_lang='en',
                      items=[MediaRecord('a', 'a.jpg', {'en': ['a dog'],
                                                        'de': ['ein Hund', 'ein Köter']}),
                             MediaRecord('b', 'b.jpg', {'en': ['a cat'], 'de': ['eine Katze']})])


def test_export_then_attach_aligns_each_line_with_its_caption(tmp_path):
    assert export_captions(_ann(), {'de': tmp_path / 'de.txt'}) == {'de': 3}
    assert (tmp_path / 'de.txt').read_text(encoding='utf-8').splitlines() == [
        'ein Hund', 'ein Köter', 'eine Katze']
    (tmp_path / 'de2en.txt').write_text('a dog\r\na mutt\r\na cat', encoding='utf-8')
    ann = attach_back_translations(_ann(), {'de': tmp_path / 'de2en.txt'})
    assert ann.back_translation_langs == ['de']
    assert [r.back_translations for r in ann.items] == [{'de': ['a dog', 'a mutt']},
                                                        {'de': ['a cat']}]
    ann.validate()


def test_wrong_line_count_and_source_language_are_refused(tmp_path):
    (tmp_path / 'de2en.txt').write_text('a dog\na cat\n', encoding='utf-8')
    with pytest.raises(ConversionError, match=r'de2en.txt has 2 lines but demo/test has 3 de '
                                              'captions'):
        attach_back_translations(_ann(), {'de': tmp_path / 'de2en.txt'})
    with pytest.raises(ConversionError, match="'en' is the source language"):
        attach_back_translations(_ann(), {'en': tmp_path / 'de2en.txt'})


def test_command_line_exports_and_attaches(tmp_path, capsys):
    dump_annotation(_ann(), tmp_path / 'ann.json')
    main_attach_back([str(tmp_path / 'ann.json'), '--export', f'de={tmp_path / "de.txt"}'])
    assert len((tmp_path / 'de.txt').read_text(encoding='utf-8').splitlines()) == 3
    (tmp_path / 'de2en.txt').write_text('a dog\na mutt\na cat\n', encoding='utf-8')
    main_attach_back([str(tmp_path / 'ann.json'), '--back-translations',
                      f'de={tmp_path / "de2en.txt"}', '--out', str(tmp_path / 'out.json')])
    assert load_annotation(tmp_path / 'out.json').items[1].back_translations == {'de': ['a cat']}
    with pytest.raises(SystemExit, match='has 2 lines'):
        (tmp_path / 'short.txt').write_text('x\ny\n', encoding='utf-8')
        main_attach_back([str(tmp_path / 'ann.json'), '--back-translations',
                          f'de={tmp_path / "short.txt"}'])


def test_a_language_back_translated_already_is_replaced_only_when_asked(tmp_path):
    # As attach_translations.py refuses it: a second file would replace the first silently.
    dump_annotation(_ann(), tmp_path / 'ann.json')
    (tmp_path / 'de2en.txt').write_text('a dog\na mutt\na cat\n', encoding='utf-8')
    (tmp_path / 'other.txt').write_text('x\ny\nz\n', encoding='utf-8')
    attach = [str(tmp_path / 'ann.json'), '--back-translations']
    main_attach_back([*attach, f'de={tmp_path / "de2en.txt"}'])
    before = (tmp_path / 'ann.json').read_bytes()
    with pytest.raises(SystemExit, match=r"demo/test already has \['de'\] back-translations; "
                       'pass --overwrite'):
        main_attach_back([*attach, f'de={tmp_path / "other.txt"}'])
    assert (tmp_path / 'ann.json').read_bytes() == before
    main_attach_back([*attach, f'de={tmp_path / "other.txt"}', '--overwrite'])
    assert load_annotation(tmp_path / 'ann.json').items[1].back_translations == {'de': ['z']}


def test_a_back_translation_file_repeating_the_captions_or_another_language_is_refused(
        tmp_path):
    """The exported German captions given as their English translation (``--export
    de=de.txt`` then ``--back-translations de=de.txt``), or one language's file copied under
    another's name, were attached: translate-test then queried with untranslated text.
    Expected: refused naming the file and what it repeats."""
    ann = replace(_ann(), languages=['en', 'de', 'fr'], items=[
        replace(record, captions={**record.captions, 'fr': [f'fr {k}' for k in range(len(
            record.captions['de']))]}) for record in _ann().items])
    german = tmp_path / 'de.txt'
    export_captions(ann, {'de': german})
    with pytest.raises(ConversionError, match=r'^de back-translation file .*de\.txt repeats the '
                                              r'de captions it translates line for line'):
        attach_back_translations(ann, {'de': german})
    de2en, fr2en = tmp_path / 'de2en.txt', tmp_path / 'fr2en.txt'
    de2en.write_text('a dog\na mutt\na cat\n', encoding='utf-8')
    fr2en.write_bytes(de2en.read_bytes())
    with pytest.raises(ConversionError, match=r'^fr back-translation file .*fr2en\.txt repeats '
                                              r'the de back-translation file .*de2en\.txt'):
        attach_back_translations(ann, {'de': de2en, 'fr': fr2en})
    with pytest.raises(ConversionError, match=r'^fr back-translation file .*fr2en\.txt repeats '
                                              r'the de back-translations demo/test holds'):
        attach_back_translations(attach_back_translations(ann, {'de': de2en}), {'fr': fr2en})


def test_a_caption_with_a_line_break_is_not_exported(tmp_path):
    ann = _ann()
    ann.items[0].captions['de'][1] = 'ein\rKöter'
    with pytest.raises(ConversionError, match='de caption 2 of demo/test holds a line break'):
        export_captions(ann, {'de': tmp_path / 'de.txt'})
    assert not (tmp_path / 'de.txt').exists()


def test_an_export_of_several_languages_writes_every_file_or_none(tmp_path):
    """A language refused after another's file was replaced left a set of mixed exports."""
    ann = _ann()
    ann.items[1].captions['de'][0] = 'eine\u2028Katze'
    en, de = tmp_path / 'en.txt', tmp_path / 'de.txt'
    en.write_text('earlier export\n', encoding='utf-8')
    dump_annotation(ann, tmp_path / 'ann.json')
    with pytest.raises(SystemExit, match='de caption 3 of demo/test holds a line break'):
        main_attach_back([str(tmp_path / 'ann.json'), '--export', f'en={en}', f'de={de}',
                          '--overwrite'])
    assert en.read_text(encoding='utf-8') == 'earlier export\n' and not de.exists()


def test_an_export_keeps_a_file_standing_there_unless_overwrite_and_then_text_alone(tmp_path):
    """--export wrote over any file: the back-translations made of an earlier export, which
    has as many lines, or the annotation another tool wrote."""
    dump_annotation(_ann(), tmp_path / 'ann.json')
    back = tmp_path / 'de2en.txt'
    back.write_text('a dog\na mutt\na cat\n', encoding='utf-8')
    other = tmp_path / 'other.json'
    dump_annotation(_ann(), other)
    weights = tmp_path / 'de.pth'
    weights.write_bytes(b'PK\x03\x04\x00\x00\x08\x00')
    kept = {path: path.read_bytes() for path in (back, other, weights)}
    export = [str(tmp_path / 'ann.json'), '--export']
    with pytest.raises(SystemExit, match=re.escape(
            f'{back} (--export de): exists and is kept: pass --overwrite to replace it (an '
            'earlier export, not a translation of one), or give another path')):
        main_attach_back([*export, f'de={back}'])
    for path, what in ((other, 'an annotation a converter wrote'), (weights, 'a binary file')):
        with pytest.raises(SystemExit, match=re.escape(
                f'{path} (--export de): exists and is {what}, no export of caption lines; it is '
                'left as it is, --overwrite replacing an earlier export alone: give another '
                'path')):
            main_attach_back([*export, f'de={path}', '--overwrite'])
    assert {path: path.read_bytes() for path in kept} == kept
    main_attach_back([*export, f'de={back}', '--overwrite'])
    assert back.read_text(encoding='utf-8') == 'ein Hund\nein Köter\neine Katze\n'


def test_out_replaces_an_annotation_of_the_dataset_alone(tmp_path):
    """--out naming a training checkpoint or a test result was written over."""
    dump_annotation(_ann(), tmp_path / 'ann.json')
    (tmp_path / 'de2en.txt').write_text('a dog\na mutt\na cat\n', encoding='utf-8')
    checkpoint = tmp_path / 'iter_3000.pth'
    checkpoint.write_bytes(b'PK\x03\x04\x00\x00\x08\x00')
    result = tmp_path / 'result.json'
    result.write_text('{"metrics": {"mAR": 50.0}}')
    kept = {path: path.read_bytes() for path in (checkpoint, result)}
    attach = [str(tmp_path / 'ann.json'), '--back-translations', f'de={tmp_path / "de2en.txt"}',
              '--out']
    for path in kept:
        with pytest.raises(SystemExit, match=re.escape(
                f'{path} (--out): exists and is no demo annotation a converter wrote')):
            main_attach_back([*attach, str(path)])
    assert {path: path.read_bytes() for path in kept} == kept
    main_attach_back([*attach, str(tmp_path / 'ann.json')])  # --out naming ANN: written over
    assert load_annotation(tmp_path / 'ann.json').back_translation_langs == ['de']
