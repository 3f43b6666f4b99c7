"""read_object: a JSON object decoded as json.loads does, one array's elements one at a time."""
from __future__ import annotations

import io
import json

import pytest

from xmr.datasets.json_stream import DuplicateKeyError, read_object

DOCUMENTS = [
    '{"a": 1, "items": [1, {"x": [2, 3]}, "s"], "b": {"c": null}}',
    ' \n{ "items" : [ ] , "a" : "\\u00e9\\ud83d\\ude00" } \r\n',
    '{"items": [{"k": "ně"}], "z": [true, false, 1.5e3, -0]}',
    '{"a": [1, 2], "b": 2}',
    '{"items": {"not": "an array"}, "a": 1}',
    '{"items": "text"}',
    '{}',
    '\t{\t"items"\t:\t[\t1\t,\r\n 2 ]\t,\t"a"\t:\t[ 3 ]\t}\t',
    # Numbers and escapes that a window's end can cut into a shorter valid value.
    '{"items": [12345, 1.5e10, -0.25E-3, 1e5, true, null, "\\u00e9\\\\"], "n": 6789}',
]
# Windows of a few characters cut every value, key and delimiter somewhere.
CHUNKS = [1, 2, 3, 5, 1 << 20]


def read_in_chunks(text, chunk, consume=list):
    return read_object(io.StringIO(text), 'items', consume, chunk=chunk)


@pytest.mark.parametrize('chunk', CHUNKS)
@pytest.mark.parametrize('text', DOCUMENTS)
def test_the_object_reads_as_json_loads_reads_it(text, chunk):
    fields, items = read_in_chunks(text, chunk)
    whole = json.loads(text)
    if isinstance(whole.get('items'), list):
        assert items == whole.pop('items')
    else:
        assert items is None
    assert fields == whole


def test_a_document_that_is_no_object_gives_no_fields():
    assert read_object(' [1, 2] ', 'items', list) == (None, None)
    assert read_object('"items"', 'items', list) == (None, None)


def test_the_elements_are_decoded_as_they_are_consumed():
    """The fourth element is no JSON: ``consume`` has received the three before it when the
    error is raised, so no element waits for the whole array to be decoded."""
    received = []

    def consume(values):
        for value in values:
            received.append(value)

    with pytest.raises(json.JSONDecodeError) as error:
        read_object('{"items": [1, [2], {"x": 3}, nope]}', 'items', consume)
    assert received == [1, [2], {'x': 3}]
    assert error.value.pos == '{"items": [1, [2], {"x": 3}, nope]}'.index('nope')


def test_the_elements_consume_leaves_are_read_past_to_the_keys_after_them():
    fields, first = read_object('{"items": [1, 2, 3], "after": "yes"}', 'items', next)
    assert (fields, first) == ({'after': 'yes'}, 1)


@pytest.mark.parametrize('text', [
    '', '{', '{"a" 1}', '{"a": 1 "b": 2}', '{"a": 1,}', '{a: 1}', '{"items": [1 2]}',
    '{"items": [1,]}', '{"items": [1', '{"a": 1} {"b": 2}', '{"a": 1}x', '[1] 2',
    # Whitespace JSON does not allow (form feed, vertical tab, no-break space).
    '{"items": [1,\x0c2]}', '{"items": [1, 2]\x0b}', '{"items":\xa0[1]}', '\x0c{}',
    # Keys that are no strings.
    '{1: 2}', '{"a": 1, null: 3}', '{["items"]: [1]}',
    # Faults on later lines, to be named by their line and column in the document.
    '{\n  "a": 1,\n  "items": [\n    {"x": 1},\n    {"x": 2,}\n  ]\n}',
    '{"a": 1,\n"items": [1,\n2,\n3]\n}\n\n  x',
    '{\n"items": [1, 2, 3]\n"b": 1}',
])
@pytest.mark.parametrize('chunk', CHUNKS)
def test_invalid_json_fails_where_json_loads_fails(text, chunk):
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as error:
        read_in_chunks(text, chunk)
    assert str(error.value) == str(expected.value)
    assert ((error.value.msg, error.value.pos, error.value.lineno, error.value.colno)
            == (expected.value.msg, expected.value.pos, expected.value.lineno,
                expected.value.colno))


@pytest.mark.parametrize('chunk', CHUNKS)
@pytest.mark.parametrize('where', ['element', 'member'])
def test_an_integer_longer_than_python_reads_fails_as_a_json_error_at_its_place(chunk, where):
    """json raised a bare ValueError ('Exceeds the limit (4300 digits) for integer string
    conversion'), which named no place and which no caller catching JSONDecodeError named the
    file of."""
    number = '-' + '7' * 5000
    text = (f'{{"a": 1,\n"items": [1,\n  {number}, 2]}}' if where == 'element'
            else f'{{"a": 1,\n"items": [1],\n  "n": {number}}}')
    with pytest.raises(json.JSONDecodeError) as error:
        read_in_chunks(text, chunk)
    assert ((error.value.pos, error.value.lineno, error.value.colno)
            == (text.index(number), 3, len('  ') + (1 if where == 'element' else 6)))
    assert error.value.msg == ('an integer of 5000 digits, more than the 4300 Python reads: '
                               'write it as a string')


@pytest.mark.parametrize('chunk', [5, 1 << 20])
def test_arrays_nested_deeper_than_json_follows_fail_as_a_json_error_at_the_deepest(chunk):
    """json raised a bare RecursionError, naming no place."""
    text = '{"items": [0,\n ' + '[' * 100_000 + ']' * 100_000 + ']}'
    with pytest.raises(json.JSONDecodeError) as error:
        read_in_chunks(text, chunk)
    deepest = text.index('[[') + 100_000 - 1
    assert (error.value.pos, error.value.lineno, error.value.colno) == (deepest, 2, deepest - 13)
    assert error.value.msg.startswith('a value nesting arrays and objects 100000 levels deep, '
                                      "deeper than Python's JSON reader follows")


@pytest.mark.parametrize('key', ['items', 'a'])
def test_a_key_given_twice_is_refused_where_json_loads_keeps_the_last(key):
    with pytest.raises(DuplicateKeyError, match=f"holds the key '{key}' twice"):
        read_object(f'{{"{key}": [1], "b": 0, "{key}": [2]}}', 'items', list)


@pytest.mark.parametrize('chunk', [4, 1 << 20])
def test_a_key_given_twice_in_an_element_or_a_member_is_refused_naming_where(chunk):
    """Inside an element ('sw' twice among an item's captions), json would keep the last list
    and drop the first; the error names the element, or the top-level key, that holds it."""
    item = '{"id": "a", "captions": {"en": ["x"], "sw": ["y"], "sw": ["z"]}}'
    with pytest.raises(DuplicateKeyError,
                       match=r"^items\[1\]: an object holds the key 'sw' twice$"):
        read_in_chunks(f'{{"items": [{{"id": "b"}}, {item}]}}', chunk)
    with pytest.raises(DuplicateKeyError, match=r"^meta: an object holds the key 'a' twice$"):
        read_in_chunks('{"items": [], "meta": {"a": 1, "b": {}, "a": 2}}', chunk)
    assert read_in_chunks('{"items": [{"a": {"a": 1}}, {"a": 2}]}', chunk) == (
        {}, [{'a': {'a': 1}}, {'a': 2}])


class CountingText(io.StringIO):
    """A text file that counts the characters read from it."""

    def __init__(self, text):
        super().__init__(text)
        self.characters_read = 0

    def read(self, size=-1):
        text = super().read(size)
        self.characters_read += len(text)
        return text


def test_a_file_is_read_a_window_at_a_time_as_its_elements_are_consumed():
    """When element ``i`` reaches ``consume``, the file has been read up to its end and at most
    two chunks beyond (the window doubles only for an element longer than it)."""
    elements = [{'media_id': f'{i:05d}', 'captions': {'en': ['a dog'] * (i % 3)}}
                for i in range(400)]
    text = json.dumps({'items': elements, 'after': 1})
    source, chunk, ends = CountingText(text), 64, []

    def consume(values):
        for value in values:
            ends.append((text.index(json.dumps(value)) + len(json.dumps(value)),
                         source.characters_read))
            yield value

    fields, items = read_object(source, 'items', lambda values: list(consume(values)),
                                chunk=chunk)
    assert (fields, items) == ({'after': 1}, elements)
    assert all(end <= read <= end + 2 * chunk for end, read in ends)
