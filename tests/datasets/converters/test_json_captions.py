"""clean_caption: a caption out of a JSON field becomes one line of the translation format."""
from __future__ import annotations

import json
import re

import pytest

from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.json_captions import clean_caption, integer_id, read_json


@pytest.mark.parametrize('line_break', ['\n', '\r\n', '\u2028', '\u2029', '\x85', '\x0b', '\x0c',
                                        '\x1c', '\x1d', '\x1e'])
def test_every_line_boundary_of_str_splitlines_is_folded_into_one_space(line_break):
    """Unicode's line and paragraph separators (U+2028, U+2029), NEL and the other boundaries
    that ``str.splitlines`` breaks at cut a caption in two for a translation tool that reads
    with it (``read().splitlines()``), and attaching its output then fails on the line count.
    Expected: folded as a newline is."""
    caption = f' a dog{line_break} running  on grass {line_break}'
    assert clean_caption(caption, 'captions.json image 1') == 'a dog running  on grass'
    assert len(clean_caption(caption, 'x').splitlines()) == 1


@pytest.mark.parametrize(('text', 'shown'), [('', ''), (' \n ', ''), ('\u200b', ' (only U+200B)'),
                                              (' \ufeff\u200c ', ' (only U+FEFF U+200C)')])
def test_a_caption_that_shows_nothing_is_refused_naming_the_record(text, shown):
    """A caption of invisible characters alone passed and was refused only as the annotation
    was written, naming the output's item, not the release's record."""
    with pytest.raises(ConversionError, match=rf'^stair\.json annotation 4: caption is empty'
                                              rf'{re.escape(shown)}$'):
        clean_caption(text, 'stair.json annotation 4')


@pytest.mark.parametrize('value, expected', [(7, 7), ('0042', 42), (0, 0)])
def test_an_integer_id_is_a_json_integer_or_a_string_of_digits(value, expected):
    assert integer_id(value, 'file x entry 3', 'image_id') == expected


@pytest.mark.parametrize('value', [True, 1.5, 2.0, None, 'abc', '-1', -1, '\u00b2', ' 7', ''])
def test_anything_else_is_refused_naming_the_record_key_and_value(value):
    """``int()`` took ``True`` and ``1.5`` as 1 and ``'\u00b2'`` not at all, naming no file."""
    with pytest.raises(ConversionError, match=f'^file x entry 3 has image_id '
                                              f'{re.escape(repr(value))}, not an integer$'):
        integer_id(value, 'file x entry 3', 'image_id')


@pytest.mark.parametrize(('text', 'fault'), [
    (b'{"annotations": [{"image_id": ' + b'7' * 5000 + b'}]}',
     'an integer of 5000 digits, more than the 4300 Python reads: write it as a string: line 1 '
     'column 31 (char 30)'),
    (b'{"annotations": ' + b'[' * 100_000 + b']' * 100_000 + b'}',
     "a value nesting arrays and objects 100001 levels deep, deeper than Python's JSON reader "
     'follows: line 1 column '),
], ids=['integer too long', 'nested too deep'])
def test_a_json_file_python_cannot_read_is_named_with_its_role_the_fault_and_its_place(
        tmp_path, text, fault):
    """A bare ValueError ('Exceeds the limit (4300 digits)') or RecursionError escaped the
    converter, naming neither the file nor its role."""
    path = tmp_path / 'captions.json'
    path.write_bytes(text)
    with pytest.raises(ConversionError) as error:
        read_json(path, 'STAIR Captions file')
    assert str(error.value).startswith(
        f'STAIR Captions file {path}: not a JSON file Python reads: {fault}')


def test_a_json_file_not_in_utf8_is_named_with_the_line_and_byte(tmp_path):
    """The position json gave was the character's in the text it decoded, not the file's."""
    path = tmp_path / 'captions.json'
    path.write_bytes(b'{"annotations": [\n{"caption": "caf\xe9"}]}')
    with pytest.raises(ConversionError, match=re.escape(
            f"STAIR Captions file {path}: not UTF-8: invalid bytes b'\\xe9' on line 2, byte 34; "
            'save it as UTF-8')):
        read_json(path, 'STAIR Captions file')


def test_half_an_emoji_in_a_caption_is_refused_naming_the_release_record():
    """A JSON '\\ud83d' without its other half decoded to a lone surrogate; the annotation
    refused it only as it was written, naming the output's item, not the release's record."""
    with pytest.raises(ConversionError, match=re.escape(
            "captions.json annotation 3: the caption holds '\\ud83d' at character 6, half of "
            'a UTF-16 surrogate pair (a JSON escape such as \\ud83d without its other half: an '
            'emoji cut in two): repair the release file, or report it to its authors')):
        clean_caption('a dog \ud83d', 'captions.json annotation 3')
    # json decodes a whole pair to one character
    assert clean_caption(json.loads('"a dog \\ud83d\\ude00"'), 'x') == 'a dog \U0001f600'
