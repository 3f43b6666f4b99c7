"""A JSON document's top-level object read with one array's elements decoded one at a time.

``json.load`` reads the whole file into one string and builds the whole document before
returning: for an annotation of 3M captions, the file's text (twice its size or more once a
caption holds a character beyond Latin-1) and millions of dicts, lists and strings at once,
whatever the caller keeps of them. Here the document is read through a window of text a chunk
at a time, and the elements of one array are handed to the caller as they are decoded (json's
C scanner decodes each), so a caller that packs them holds a chunk of the text and what it
packed, never the text or the tree.
"""
from __future__ import annotations

import functools
import io
import itertools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any, TextIO, TypeVar

from xmr.json_files import raw_json_decoder

__all__ = ['DuplicateKeyError', 'read_object']

_T = TypeVar('_T')
_WHITESPACE = re.compile(r'[ \t\n\r]*')
_CHUNK = 1 << 20
_COMMA = "Expecting ',' delimiter"


class DuplicateKeyError(ValueError):
    """An object of the document holds a key twice (``json.load`` would keep the last
    silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members as a dict, refusing a key given twice."""
    members = dict(pairs)
    if len(members) != len(pairs):
        key = next(key for index, (key, _) in enumerate(pairs)
                   if any(key == other for other, _ in pairs[:index]))
        raise DuplicateKeyError(f'an object holds the key {key!r} twice')
    return members


# A number longer than Python converts and arrays nested deeper than json follows fail as
# JSONDecodeErrors at their place, as syntax does: a bare ValueError or RecursionError named no
# file, line or column.
_decode = raw_json_decoder(object_pairs_hook=_unique_keys)


def read_object(source: str | TextIO, streamed: str,
                consume: Callable[[Iterator[Any]], _T], chunk: int = _CHUNK
                ) -> tuple[dict[str, Any] | None, _T | None]:
    """Decode the JSON object in ``source``, handing the elements of its array under
    ``streamed`` to ``consume`` as they are decoded.

    Args:
        source: the document, or a text file open on it (read ``chunk`` characters at a time).
        streamed: the key whose array is streamed.
        consume: called once with an iterator over the array's elements; the elements it
            leaves are decoded and dropped.
        chunk: the characters read at a time; an element longer than the window is read whole.

    Returns:
        ``(fields, consumed)``: the object's other keys, decoded whole (``streamed`` among them
        when its value is no array), and ``consume``'s result (``None`` without that array);
        ``(None, None)`` when the document is valid JSON but no object.

    Raises:
        json.JSONDecodeError: the document is no valid JSON, or holds an integer longer than
            Python converts or arrays and objects nested deeper than ``json`` follows
            (:func:`~xmr.json_files.raw_json_decoder`), with the position, line and column in the
            document at fault, as ``json.loads`` gives them (its ``doc`` is the window).
        DuplicateKeyError: a key appears twice in one object, naming the top-level key or
            the element of ``streamed`` that holds it.
    """
    window = _Window(io.StringIO(source) if isinstance(source, str) else source, chunk)
    if window.step(_next_char) != '{':
        window.step(_value_then_end)  # no JSON at all raises here
        return None, None
    window.position += 1
    fields: dict[str, Any] = {}
    consumed: _T | None = None
    seen: set[str] = set()
    if window.step(_next_char) == '}':
        window.position += 1
        window.step(_end)
        return fields, None
    while True:
        key = window.step(_key)
        if key in seen:
            raise DuplicateKeyError(f'the top-level object holds the key {key!r} twice')
        seen.add(key)
        if key == streamed and window.step(_next_char) == '[':
            iterator = _elements(window, streamed)
            consumed = consume(iterator)
            for _ in iterator:  # what consume left, decoded to reach the keys after the array
                pass
        else:
            try:
                fields[key] = window.step(_member_value)
            except DuplicateKeyError as error:
                raise DuplicateKeyError(f'{key}: {error}') from None
        if window.step(_next_char) == '}':
            window.position += 1
            window.step(_end)
            return fields, consumed
        window.step(_member_comma)


class _Window:
    """The document seen through a window of its text: from the step being parsed on, at
    least a chunk's worth.

    A step is parsed from :attr:`position` in :attr:`text`. Where it fails, or ends at the
    window's end before the document's (a number cut in two decodes as a shorter one), the
    window takes in more of the document and the step is parsed again; at the document's end
    its error is the document's.
    """

    def __init__(self, source: TextIO, chunk: int) -> None:
        self.source, self.chunk = source, chunk
        self.text, self.position, self.at_end = '', 0, False
        self.offset = 0         # the document's index of text[0]
        self.lines = 0          # newlines dropped with the text before the window
        self.last_newline = -1  # the document's index of the last of them

    def step(self, parse: Callable[[str, int], tuple[_T, int]]) -> _T:
        """``parse(text, position) -> (result, end)`` on the window; its result once it
        succeeds with ``end`` inside the window, or at the document's end."""
        while True:
            try:
                result, end = parse(self.text, self.position)
            except json.JSONDecodeError as error:
                if self.at_end:
                    raise self._in_document(error) from None
            else:
                if end < len(self.text) or self.at_end:
                    self.position = end
                    return result
            self._widen()

    def _widen(self) -> None:
        """Drop the text before :attr:`position` and read at least as much again as is kept."""
        dropped = self.position
        newlines = self.text.count('\n', 0, dropped)
        if newlines:
            self.lines += newlines
            self.last_newline = self.offset + self.text.rfind('\n', 0, dropped)
        kept = self.text[dropped:]
        more = self.source.read(max(self.chunk, len(kept)))
        self.at_end = not more
        self.text, self.offset, self.position = kept + more, self.offset + dropped, 0

    def _in_document(self, error: json.JSONDecodeError) -> json.JSONDecodeError:
        """``error``, raised at a position of the window, at that position of the document."""
        position = self.offset + error.pos
        newline = self.text.rfind('\n', 0, error.pos)
        last_newline = self.offset + newline if newline >= 0 else self.last_newline
        line = self.lines + self.text.count('\n', 0, error.pos) + 1
        moved = json.JSONDecodeError(error.msg, error.doc, error.pos)
        moved.pos, moved.lineno, moved.colno = position, line, position - last_newline
        moved.args = (f'{error.msg}: line {line} column {moved.colno} (char {position})',)
        return moved


def _elements(window: _Window, name: str) -> Iterator[Any]:
    """The elements of the array ``name`` at ``window.position`` (``[``), decoded one at a time;
    once exhausted, the window is past its ``]``."""
    window.position += 1
    if window.step(_next_char) == ']':
        window.position += 1
        return
    for index in itertools.count():
        try:
            element = window.step(_element)
        except DuplicateKeyError as error:
            raise DuplicateKeyError(f'{name}[{index}]: {error}') from None
        yield element
        if window.step(_next_char) == ']':
            window.position += 1
            return
        window.step(_element_comma)


def _skip(text: str, position: int) -> int:
    return _WHITESPACE.match(text, position).end()


def _next_char(text: str, position: int) -> tuple[str, int]:
    """The next character past whitespace ('' at the end), the position at it."""
    position = _skip(text, position)
    return text[position:position + 1], position


def _value_before(text: str, position: int, closing: str) -> tuple[Any, int]:
    """A value, the position past the whitespace after it, where ``,`` or ``closing`` must
    stand (checked here, so that a number cut by the window's end fails and is read again)."""
    value, end = _decode(text, _skip(text, position))
    end = _skip(text, end)
    if end < len(text) and text[end] not in (',', closing):
        raise json.JSONDecodeError(_COMMA, text, end)
    return value, end


def _element(text: str, position: int) -> tuple[Any, int]:
    return _value_before(text, position, ']')


def _member_value(text: str, position: int) -> tuple[Any, int]:
    return _value_before(text, position, '}')


def _key(text: str, position: int) -> tuple[str, int]:
    """A member's key and its ``:``; the position past the whitespace after the ``:``."""
    position = _skip(text, position)
    _expect(text, position, '"', 'Expecting property name enclosed in double quotes')
    key, position = _decode(text, position)
    position = _skip(text, position)
    _expect(text, position, ':', "Expecting ':' delimiter")
    return key, _skip(text, position + 1)


def _comma(text: str, position: int, closing: str) -> tuple[None, int]:
    """The ``,`` at ``position`` and the position past the whitespace after it, where the next
    member or element stands: a comma before ``closing`` fails as this Python's ``json`` fails
    on it (:func:`_trailing_comma`)."""
    _expect(text, position, ',', _COMMA)
    after = _skip(text, position + 1)
    if text.startswith(closing, after):
        message, at_comma = _trailing_comma(closing)
        raise json.JSONDecodeError(message, text, position if at_comma else after)
    return None, after


def _member_comma(text: str, position: int) -> tuple[None, int]:
    return _comma(text, position, '}')


def _element_comma(text: str, position: int) -> tuple[None, int]:
    return _comma(text, position, ']')


@functools.cache
def _trailing_comma(closing: str) -> tuple[str, bool]:
    """How this Python's ``json`` fails on a comma before ``closing``: its message, and whether
    it places it at the comma. Python 3.13 says 'Illegal trailing comma before end of object' at
    the comma, earlier ones what they expected after it ('Expecting value') at ``closing``."""
    text = '{"a": 1, }' if closing == '}' else '[1, ]'
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return error.msg, error.pos == text.index(',')
    raise AssertionError(f'json read {text!r}')


def _value_then_end(text: str, position: int) -> tuple[None, int]:
    _, position = _decode(text, position)
    return _end(text, position)


def _end(text: str, position: int) -> tuple[None, int]:
    position = _skip(text, position)
    if position != len(text):
        raise json.JSONDecodeError('Extra data', text, position)
    return None, position


def _expect(text: str, position: int, char: str, message: str) -> None:
    if not text.startswith(char, position):
        raise json.JSONDecodeError(message, text, position)
