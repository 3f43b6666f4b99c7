"""JSON files read with every fault named: the file, the fault, its line and column."""
from __future__ import annotations

import json
import re

import pytest

from xmr.json_files import (
    JSONFileError,
    first_invalid_utf8,
    load_json,
    loads_json,
    lone_surrogate,
)


@pytest.mark.parametrize('text', ['{"a": [1, -2, 3.5e3, "9999", {"b": null}], "c": true}',
                                  ' [ "[[[", "\\"]", 12 ] ', '"x"', '0'])
def test_json_text_reads_as_json_loads_reads_it(text):
    assert loads_json(text) == json.loads(text)


@pytest.mark.parametrize(('text', 'message', 'position'), [
    ('{"id": "' + '9' * 5000 + '",\n "n": -' + '7' * 4301 + '}',
     'an integer of 4301 digits, more than the 4300 Python reads: write it as a string',
     8 + 5000 + 3 + 6),
    ('{"s": "[[[", "a": [' + '[' * 100_000 + ']' * 100_000 + ']}',
     "a value nesting arrays and objects 100002 levels deep, deeper than Python's JSON reader "
     'follows',
     len('{"s": "[[[", "a": [') + 99_999),
], ids=['integer too long (a string of digits is text)', 'nested too deep (a bracket in a '
        'string is text)'])
def test_what_json_raises_without_a_place_is_a_json_error_at_the_fault(text, message, position):
    """A bare ValueError ('Exceeds the limit (4300 digits) for integer string conversion') or
    RecursionError named no place, and no caller catching JSONDecodeError named the file."""
    with pytest.raises(json.JSONDecodeError) as error:
        loads_json(text)
    assert (error.value.msg, error.value.pos) == (message, position)


def test_a_json_file_is_read_without_its_byte_order_mark_and_its_faults_name_it(tmp_path):
    path = tmp_path / 'a.json'
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}')
    assert load_json(path) == {'a': 1}
    path.write_bytes(b'{"a":\n 1 2}')
    with pytest.raises(JSONFileError, match=re.escape(
            f"{path}: not a JSON file Python reads: Expecting ',' delimiter: line 2 column 4 "
            '(char 9)')):
        load_json(path)
    path.write_bytes(b'{"a":\n "caf\xe9"}')
    with pytest.raises(JSONFileError, match=re.escape(
            f"{path}: not UTF-8: invalid bytes b'\\xe9' on line 2, byte 11; save it as UTF-8")):
        load_json(path)


def test_a_lone_surrogate_is_named_by_its_place_in_the_document():
    assert lone_surrogate({'a': ['ok', 'caf\u00e9 \U0001f600'], 'b': 1}, 'r.json') is None
    assert lone_surrogate({'a': ['ok', 'x \ud83d']}, 'r.json') == (
        "r.json['a'][1] holds '\\ud83d' at character 2, half of a UTF-16 surrogate pair")
    assert lone_surrogate({'k\udce9': 1}, 'r.json') == (
        "r.json: the key 'k\\udce9' holds '\\udce9' at character 1, half of a UTF-16 surrogate "
        'pair')


@pytest.mark.parametrize('text', ['[1]x', '1 2', '\u00a01', '\x0c[1]', '[1]\x0b'])
def test_text_json_loads_refuses_is_refused_alike(text):
    """Extra data of one character, and spaces JSON does not allow (Python's ``\\s`` does)."""
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as refused:
        loads_json(text)
    assert (refused.value.msg, refused.value.pos) == (expected.value.msg, expected.value.pos)


def test_the_integer_too_long_is_placed_past_longer_floats_and_signs():
    """A float's integer part may be longer than an int's limit (float reads it), and a minus
    sign is no digit: neither is the fault."""
    limit = 4300
    text = f'[1{"0" * limit}.5, -{"9" * limit}, {"7" * (limit + 1)}]'
    with pytest.raises(json.JSONDecodeError) as error:
        loads_json(text)
    assert error.value.pos == text.index('7')


@pytest.mark.parametrize('brackets', ['[]', '{}'])
def test_the_nesting_too_deep_is_placed_in_the_value_that_failed_at_its_first_deepest_point(
        brackets):
    """Two branches of one value reach the same depth: the first is the fault. A deeper value
    after it is another value, not read."""
    def nested(depth):
        if brackets == '[]':
            return '[' * depth + ']' * depth
        return '{"a": ' * depth + '1' + '}' * depth

    depth = 100_000
    failed = f'[{nested(depth)}, {nested(depth)}]'
    with pytest.raises(json.JSONDecodeError) as error:
        loads_json(f'{failed} {nested(depth + 5)}')
    step = 1 if brackets == '[]' else len('{"a": ')  # from one opening bracket to the next
    assert (error.value.msg, error.value.pos) == (
        f"a value nesting arrays and objects {depth + 1} levels deep, deeper than Python's JSON "
        'reader follows', 1 + (depth - 1) * step)


def test_the_first_lone_surrogate_of_the_document_is_named():
    assert lone_surrogate({'a': ['\ud83d', '\ude00'], 'b': '\ud83d'}, 'r.json') == (
        "r.json['a'][0] holds '\\ud83d' at character 0, half of a UTF-16 surrogate pair")


def test_a_file_whose_bytes_are_utf8_when_read_again_is_said_to_have_changed(tmp_path):
    (tmp_path / 'a.json').write_text('{"a": "café"}', encoding='utf-8')
    assert first_invalid_utf8(tmp_path / 'a.json') == 'it changed as it was read'
