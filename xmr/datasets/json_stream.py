"""A JSON document's top-level object read with one array's elements decoded one at a time.

``json.load`` builds the whole document before returning: for an annotation of 3M captions,
millions of dicts, lists and strings at once, whatever the caller keeps of them. Here the
elements of one array are handed to the caller as they are decoded (json's C scanner decodes
each), so a caller that packs them holds the text and what it packed, never the whole tree.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ['DuplicateKeyError', 'read_object']

_T = TypeVar('_T')
_WHITESPACE = re.compile(r'[ \t\n\r]*')
_decode = json.JSONDecoder().raw_decode


class DuplicateKeyError(ValueError):
    """The top-level object holds a key twice (``json.load`` would keep the last silently)."""


class _Elements:
    """The elements of the array starting at ``text[start]`` (``[``), decoded one at a time;
    once exhausted, :attr:`end` is the position after its ``]``."""

    def __init__(self, text: str, start: int) -> None:
        self.text, self.end = text, start + 1

    def __iter__(self) -> Iterator[Any]:
        text, position = self.text, _skip(self.text, self.end)
        if text.startswith(']', position):
            self.end = position + 1
            return
        while True:
            value, position = _decode(text, position)
            yield value
            position = _skip(text, position)
            if text.startswith(']', position):
                self.end = position + 1
                return
            _expect(text, position, ',', "Expecting ',' delimiter")
            position = _skip(text, position + 1)


def read_object(text: str, streamed: str, consume: Callable[[Iterator[Any]], _T]
                ) -> tuple[dict[str, Any] | None, _T | None]:
    """Decode the JSON object ``text``, handing the elements of its array under ``streamed`` to
    ``consume`` as they are decoded.

    Args:
        text: the document.
        streamed: the key whose array is streamed.
        consume: called once with an iterator over the array's elements; the elements it
            leaves are decoded and dropped.

    Returns:
        ``(fields, consumed)``: the object's other keys, decoded whole (``streamed`` among them
        when its value is no array), and ``consume``'s result (``None`` without that array);
        ``(None, None)`` when the document is valid JSON but no object.

    Raises:
        json.JSONDecodeError: ``text`` is no valid JSON, with the position at fault.
        DuplicateKeyError: a key appears twice in the top-level object.
    """
    position = _skip(text, 0)
    if not text.startswith('{', position):
        _, position = _decode(text, position)  # no JSON at all raises here
        _expect_end(text, position)
        return None, None
    fields: dict[str, Any] = {}
    consumed: _T | None = None
    seen: set[str] = set()
    position = _skip(text, position + 1)
    if text.startswith('}', position):
        _expect_end(text, position + 1)
        return fields, None
    while True:
        _expect(text, position, '"', 'Expecting property name enclosed in double quotes')
        key, position = _decode(text, position)
        if key in seen:
            raise DuplicateKeyError(f'the top-level object holds the key {key!r} twice')
        seen.add(key)
        position = _skip(text, position)
        _expect(text, position, ':', "Expecting ':' delimiter")
        position = _skip(text, position + 1)
        if key == streamed and text.startswith('[', position):
            elements = _Elements(text, position)
            iterator = iter(elements)
            consumed = consume(iterator)
            for _ in iterator:  # what consume left, decoded to reach the keys after the array
                pass
            position = elements.end
        else:
            fields[key], position = _decode(text, position)
        position = _skip(text, position)
        if text.startswith('}', position):
            _expect_end(text, position + 1)
            return fields, consumed
        _expect(text, position, ',', "Expecting ',' delimiter")
        position = _skip(text, position + 1)


def _skip(text: str, position: int) -> int:
    return _WHITESPACE.match(text, position).end()


def _expect(text: str, position: int, char: str, message: str) -> None:
    if not text.startswith(char, position):
        raise json.JSONDecodeError(message, text, position)


def _expect_end(text: str, position: int) -> None:
    position = _skip(text, position)
    if position != len(text):
        raise json.JSONDecodeError('Extra data', text, position)
