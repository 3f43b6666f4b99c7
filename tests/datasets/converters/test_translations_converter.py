"""The plain machine-translation format: export, attach, misalignment caught."""
from __future__ import annotations

import re
import tracemalloc
from dataclasses import replace

import pytest

from xmr.datasets.annotation import Annotation, MediaRecord, dump_annotation, load_annotation
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.translations import (
    attach_translations,
    export_source_captions,
    main_attach,
    main_export,
)


def _source() -> Annotation:
    return Annotation(dataset='demo', split='train', media_type='image', languages=['en'],
                      source_lang='en',
                      items=[MediaRecord('a', 'a.jpg', {'en': ['a dog', 'a brown dog']}),
                             MediaRecord('b', 'b.jpg', {'en': ['a cat']}),
                             MediaRecord('c', 'c.jpg', {'en': ['two cats', 'cats', 'a pet']})])


def test_exported_captions_go_to_the_file_as_they_are_written(tmp_path):
    """The export joined every caption into one text before writing it: a copy of each caption
    with its newline and their join, twice the file (CC3M's 3M captions: ~0.5 GB)."""
    ann = Annotation(dataset='demo', split='train', media_type='image', languages=['en'],
                     source_lang='en',
                     items=[MediaRecord(f'{i}', f'{i}.jpg', {'en': [f'a dog on the grass {i}']})
                            for i in range(20000)])
    path = tmp_path / 'source.txt'
    tracemalloc.start()
    try:
        assert export_source_captions(ann, path) == 20000
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < path.stat().st_size / 2
    assert path.read_text(encoding='utf-8').splitlines()[-1] == 'a dog on the grass 19999'


def test_export_then_attach_aligns_each_line_with_its_caption(tmp_path):
    exported = tmp_path / 'source.txt'
    assert export_source_captions(_source(), exported) == 6
    assert exported.read_text(encoding='utf-8').splitlines() == [
        'a dog', 'a brown dog', 'a cat', 'two cats', 'cats', 'a pet']
    german = tmp_path / 'train.de.txt'
    german.write_text('ein Hund\r\nein brauner Hund\r\neine Katze\r\nzwei Katzen\r\nKatzen\r\n'
                      'ein Haustier', encoding='utf-8')
    japanese = tmp_path / 'train.ja.txt'
    japanese.write_text('犬\n茶色の犬\n猫\n二匹の猫\n猫たち\nペット\n', encoding='utf-8')
    ann = attach_translations(_source(), {'de': german, 'ja': japanese})
    assert ann.translation_langs == ['de', 'ja']
    assert ann.items[0].translations == {'de': ['ein Hund', 'ein brauner Hund'],
                                         'ja': ['犬', '茶色の犬']}
    assert ann.items[1].translations == {'de': ['eine Katze'], 'ja': ['猫']}
    assert ann.items[2].translations['ja'] == ['二匹の猫', '猫たち', 'ペット']
    ann.validate()


def test_a_translation_file_one_line_short_names_file_and_counts(tmp_path):
    german = tmp_path / 'train.de.txt'
    german.write_text('1\n2\n3\n4\n5\n', encoding='utf-8')
    with pytest.raises(ConversionError) as info:
        attach_translations(_source(), {'de': german})
    assert str(german) in str(info.value)
    assert 'has 5 lines' in str(info.value) and 'has 6 en source captions' in str(info.value)


def test_a_line_an_mt_system_left_blank_names_the_translation_file_and_line(tmp_path):
    """A translation tool leaves a zero-width space for a line it cannot translate: the line
    passed the reader and the command stopped naming the annotation's item (``tt.json: item
    1 (media_id 'b'): translations['de'][0] must be a non-empty string``), not the file and
    line to repair. Expected: the file and line, and the annotation left as it was."""
    ann_path = tmp_path / 'train.json'
    dump_annotation(_source(), ann_path)
    before = ann_path.read_bytes()
    german = tmp_path / 'de.txt'
    german.write_text('ein Hund\nein brauner Hund\n\u200b\nzwei Katzen\nKatzen\nein Haustier\n',
                      encoding='utf-8')
    with pytest.raises(SystemExit, match=r'^error: de translation file .*de\.txt has an empty '
                                         r'line 3 \(only U\+200B\)$'):
        main_attach([str(ann_path), '--translations', f'de={german}'])
    assert ann_path.read_bytes() == before


def test_a_translation_file_repeating_another_text_line_for_line_is_refused(tmp_path):
    """PECTVLM's XTD10 ``translated_from_en/ko.txt`` is its ``it.txt`` byte for byte: attached
    as given by docs/methods/pectvlm.md, 'Korean' trained on Italian, without a word; so did the
    exported source file given as a translation. Expected: each refused naming the file and
    what it repeats, in one call or against the translations already attached."""
    italian = tmp_path / 'it.txt'
    italian.write_text('un cane\nun cane marrone\nun gatto\ndue gatti\ngatti\nun animale\n',
                       encoding='utf-8')
    korean = tmp_path / 'ko.txt'
    korean.write_bytes(italian.read_bytes())
    with pytest.raises(ConversionError, match=r'^ko translation file .*ko\.txt repeats the it '
                                              r'translation file .*it\.txt line for line'):
        attach_translations(_source(), {'it': italian, 'ko': korean})
    attached = attach_translations(_source(), {'it': italian})
    with pytest.raises(ConversionError, match=r'^ko translation file .*ko\.txt repeats the it '
                                              r'translations demo/train holds line for line'):
        attach_translations(attached, {'ko': korean})
    exported = tmp_path / 'en.txt'
    export_source_captions(_source(), exported)
    with pytest.raises(ConversionError, match=r'^de translation file .*en\.txt repeats the en '
                                              r'source captions it translates line for line'):
        attach_translations(_source(), {'de': exported})
    # Replacing a language's translations compares with the others alone.
    assert attach_translations(attached, {'it': italian}, overwrite=True).items == attached.items


def test_text_that_differs_on_one_line_is_attached(tmp_path):
    """Translations that agree with the source or another language on some lines (names,
    numbers, loan words) are translations."""
    italian = tmp_path / 'it.txt'
    italian.write_text('un cane\nun cane marrone\nun gatto\ndue gatti\ngatti\nun animale\n',
                       encoding='utf-8')
    spanish = tmp_path / 'es.txt'
    spanish.write_text('un cane\nun cane marrone\nun gatto\ndue gatti\ngatti\nun animal\n',
                       encoding='utf-8')
    ann = attach_translations(_source(), {'it': italian, 'es': spanish})
    assert ann.items[2].translations == {'it': ['due gatti', 'gatti', 'un animale'],
                                         'es': ['due gatti', 'gatti', 'un animal']}


def test_command_lines_round_trip(tmp_path):
    ann_path = tmp_path / 'ann.json'
    dump_annotation(_source(), ann_path)
    main_export([str(ann_path), str(tmp_path / 'src.txt')])
    lines = (tmp_path / 'src.txt').read_text(encoding='utf-8').splitlines()
    (tmp_path / 'cs.txt').write_text(''.join(f'{line} (cs)\n' for line in lines),
                                     encoding='utf-8')
    main_attach([str(ann_path), '--translations', f'cs={tmp_path / "cs.txt"}', '--out',
                 str(tmp_path / 'out.json')])
    assert load_annotation(tmp_path / 'out.json').items[2].translations['cs'][1] == 'cats (cs)'
    (tmp_path / 'cs2.txt').write_text(''.join(f'{line} (cs2)\n' for line in lines),
                                      encoding='utf-8')
    before = (tmp_path / 'out.json').read_bytes()
    with pytest.raises(SystemExit, match=r"demo/train already has \['cs'\] translations; pass "
                       '--overwrite'):
        main_attach([str(tmp_path / 'out.json'), '--translations', f'cs={tmp_path / "cs2.txt"}'])
    assert (tmp_path / 'out.json').read_bytes() == before
    main_attach([str(tmp_path / 'out.json'), '--translations', f'cs={tmp_path / "cs2.txt"}',
                 '--overwrite'])
    assert load_annotation(tmp_path / 'out.json').items[2].translations['cs'][1] == 'cats (cs2)'
    with pytest.raises(SystemExit, match="translation language 'en' is the source"):
        main_attach([str(ann_path), '--translations', f'en={tmp_path / "cs.txt"}'])
    # Another language attached from the source into that --out dropped Czech from it.
    (tmp_path / 'de.txt').write_text(''.join(f'{line} (de)\n' for line in lines),
                                     encoding='utf-8')
    before = (tmp_path / 'out.json').read_bytes()
    with pytest.raises(SystemExit, match=r"out.json: holds texts attached after its conversion "
                       r"\(translation_langs \['cs'\]\) .* or give --out another file$"):
        main_attach([str(ann_path), '--translations', f'de={tmp_path / "de.txt"}', '--out',
                     str(tmp_path / 'out.json')])
    assert (tmp_path / 'out.json').read_bytes() == before


def test_the_export_keeps_a_file_standing_at_out_unless_overwrite(tmp_path):
    """OUT was written over whatever stood there: a translation made of an earlier export
    (as many lines), an annotation."""
    ann_path = tmp_path / 'ann.json'
    dump_annotation(_source(), ann_path)
    german = tmp_path / 'de.txt'
    german.write_text(''.join(f'Satz {i}\n' for i in range(6)), encoding='utf-8')
    translated = german.read_bytes()
    with pytest.raises(SystemExit, match=re.escape(
            f'{german} (OUT): exists and is kept: pass --overwrite to replace it (an earlier '
            'export, not a translation of one), or give another path')):
        main_export([str(ann_path), str(german)])
    assert german.read_bytes() == translated
    other = tmp_path / 'other.json'
    dump_annotation(_source(), other)
    with pytest.raises(SystemExit, match=re.escape(
            f'{other} (OUT): exists and is an annotation a converter wrote, no export')):
        main_export([str(ann_path), str(other), '--overwrite'])
    main_export([str(ann_path), str(german), '--overwrite'])
    assert german.read_text(encoding='utf-8').splitlines()[:2] == ['a dog', 'a brown dog']


@pytest.mark.parametrize('line_break', ['\n', '\r', '\u2028', '\x85', '\x0b'])
def test_a_caption_with_a_line_break_is_not_exported(tmp_path, line_break):
    """Every boundary str.splitlines breaks at: those but \\n and \\r were written, and a tool
    reading the file so saw one line more than there are captions."""
    ann = _source()
    ann.items[1].captions['en'][0] = f'a cat{line_break}on a mat'
    with pytest.raises(ConversionError, match="source caption 3 of demo/train holds a line break"):
        export_source_captions(ann, tmp_path / 'source.txt')
    assert not (tmp_path / 'source.txt').exists()


def test_a_second_language_attached_later_keeps_the_first(tmp_path):
    (tmp_path / 'de.txt').write_text(''.join(f'de {i}\n' for i in range(6)), encoding='utf-8')
    (tmp_path / 'fr.txt').write_text(''.join(f'fr {i}\n' for i in range(6)), encoding='utf-8')
    german = attach_translations(_source(), {'de': tmp_path / 'de.txt'})
    both = attach_translations(german, {'fr': tmp_path / 'fr.txt'})
    assert both.translation_langs == ['de', 'fr']
    assert both.items[2].translations == {'de': ['de 3', 'de 4', 'de 5'],
                                          'fr': ['fr 3', 'fr 4', 'fr 5']}
    both.validate()


def test_out_replaces_an_annotation_of_the_dataset_alone(tmp_path):
    """--out naming a training checkpoint, a test result, another dataset's annotation or the
    dataset's test annotation (from a train annotation) was written over by the annotation
    (dump_converted refused a file losing languages alone)."""
    ann_path = tmp_path / 'ann.json'
    dump_annotation(_source(), ann_path)
    (tmp_path / 'cs.txt').write_text('1\n2\n3\n4\n5\n6\n', encoding='utf-8')
    checkpoint = tmp_path / 'iter_3000.pth'
    checkpoint.write_bytes(b'PK\x03\x04\x00\x00\x08\x00')
    result = tmp_path / 'result.json'
    result.write_text('{"metrics": {"mAR": 50.0}}')
    other = tmp_path / 'multi30k_train.json'
    dump_annotation(replace(_source(), dataset='multi30k'), other)
    test_split = tmp_path / 'demo_test.json'
    dump_annotation(replace(_source(), split='test'), test_split)
    kept = {path: path.read_bytes() for path in (checkpoint, result, other, test_split)}
    attach = [str(ann_path), '--translations', f'cs={tmp_path / "cs.txt"}', '--out']
    for path in (checkpoint, result, other):
        with pytest.raises(SystemExit, match=re.escape(
                f'{path} (--out): exists and is no demo annotation a converter wrote; it is kept '
                '(a converter replaces its own earlier output alone): give --out another file')):
            main_attach([*attach, str(path)])
    with pytest.raises(SystemExit, match=re.escape(
            f"{test_split} (--out): holds the demo 'test' annotation, and this writes 'train'; "
            'it is kept: give --out another file')):
        main_attach([*attach, str(test_split)])
    assert {path: path.read_bytes() for path in kept} == kept
    out = tmp_path / 'out.json'
    main_attach([*attach, str(out)])
    main_attach([*attach, str(out)])  # an earlier run's annotation of the dataset: replaced
    assert load_annotation(out).items[0].translations == {'cs': ['1', '2']}
