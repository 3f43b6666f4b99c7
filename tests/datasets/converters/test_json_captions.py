"""clean_caption: a caption out of a JSON field becomes one line of the translation format."""
from __future__ import annotations

import re

import pytest

from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.json_captions import clean_caption, integer_id


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


@pytest.mark.parametrize('value, expected', [(7, 7), ('0042', 42), (0, 0)])
def test_an_integer_id_is_a_json_integer_or_a_string_of_digits(value, expected):
    assert integer_id(value, 'file x entry 3', 'image_id') == expected


@pytest.mark.parametrize('value', [True, 1.5, 2.0, None, 'abc', '-1', -1, '\u00b2', ' 7', ''])
def test_anything_else_is_refused_naming_the_record_key_and_value(value):
    """``int()`` took ``True`` and ``1.5`` as 1 and ``'\u00b2'`` not at all, naming no file."""
    with pytest.raises(ConversionError, match=f'^file x entry 3 has image_id '
                                              f'{re.escape(repr(value))}, not an integer$'):
        integer_id(value, 'file x entry 3', 'image_id')
