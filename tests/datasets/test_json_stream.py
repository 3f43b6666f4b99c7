"""read_object: a JSON object decoded as json.loads does, one array's elements one at a time."""
from __future__ import annotations

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
]


@pytest.mark.parametrize('text', DOCUMENTS)
def test_the_object_reads_as_json_loads_reads_it(text):
    fields, items = read_object(text, 'items', list)
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
])
def test_invalid_json_fails_where_json_loads_fails(text):
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as error:
        read_object(text, 'items', list)
    assert (error.value.msg, error.value.pos) == (expected.value.msg, expected.value.pos)


@pytest.mark.parametrize('key', ['items', 'a'])
def test_a_key_given_twice_is_refused_where_json_loads_keeps_the_last(key):
    with pytest.raises(DuplicateKeyError, match=f"holds the key '{key}' twice"):
        read_object(f'{{"{key}": [1], "b": 0, "{key}": [2]}}', 'items', list)
