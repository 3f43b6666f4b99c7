"""Reading JSON files a user gave, every fault named with the file, its line and column.

:func:`load_json` (or :func:`loads_json` for text already read): every way Python's ``json``
fails on a file, a number too long or arrays nested too deep among them, is an error naming the
file, the fault and where it stands, never a bare ``ValueError`` or ``RecursionError``.
:func:`raw_json_decoder` places those faults for a reader that decodes a stream piece by piece
(:mod:`xmr.datasets.json_stream`). :func:`lone_surrogate` finds half an emoji in a decoded
document.
"""
from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ['JSONFileError', 'first_invalid_utf8', 'json_file_problem', 'load_json',
           'loads_json', 'lone_surrogate', 'raw_json_decoder']


class JSONFileError(ValueError):
    """A file is no JSON document that Python reads; the message names the file, the fault and
    where it stands (:func:`json_file_problem`)."""


class _LongInteger(ValueError):
    """An integer literal longer than Python converts (``sys.get_int_max_str_digits``)."""

    def __init__(self, digits: str) -> None:
        super().__init__(f'an integer of {len(digits.lstrip("-"))} digits')
        self.digits = digits


def _integer(digits: str) -> int:
    """``json``'s ``parse_int``: ``int``, whose refusal of a long number is told from the other
    ``ValueError``\\ s a decode raises (a hook's) by its type."""
    try:
        return int(digits)
    except ValueError:
        raise _LongInteger(digits) from None


#: A token of JSON text, for finding a fault the decoder does not place: a string whole (the
#: brackets and digits inside it are text), a number (group 1 its integer part, group 2 its
#: fraction and exponent, empty for an integer), or a bracket.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|(-?\d+)((?:\.\d+)?(?:[eE][-+]?\d+)?)|[\[\]{}]')


def _placed(error: _LongInteger | RecursionError, text: str,
            start: int) -> json.JSONDecodeError:
    """The error of a decode of ``text`` from ``start`` that ``json`` raises without a place,
    as a :class:`json.JSONDecodeError` at the fault: the first integer too long, or the
    deepest point of the nesting (its opening bracket)."""
    if isinstance(error, _LongInteger):
        limit = sys.get_int_max_str_digits()
        position = next((token.start() for token in _TOKEN.finditer(text, start)
                         if token[1] and not token[2]
                         and len(token[1].lstrip('-')) > limit), start)
        return json.JSONDecodeError(f'{error}, more than the {limit} Python reads: write it as '
                                    'a string', text, position)
    depth, deepest, position = 0, 0, start
    for token in _TOKEN.finditer(text, start):
        bracket = token[0]
        if bracket in ('[', '{'):
            depth += 1
            if depth > deepest:
                deepest, position = depth, token.start()
        elif bracket in (']', '}'):
            depth -= 1
            if depth <= 0:
                break  # the value that failed ends here
    return json.JSONDecodeError(f'a value nesting arrays and objects {deepest} levels deep, '
                                "deeper than Python's JSON reader follows", text, position)


def raw_json_decoder(**options: Any) -> Callable[[str, int], tuple[Any, int]]:
    """``json.JSONDecoder(**options).raw_decode`` whose every fault in the text is a
    :class:`json.JSONDecodeError` with its position: an integer longer than Python converts
    (a bare ``ValueError`` naming no place) and arrays or objects nested deeper than the
    decoder follows (a ``RecursionError``) among them.

    Args:
        options: ``json.JSONDecoder``'s (``object_pairs_hook``, ...); not ``parse_int``.

    Returns:
        ``decode(text, start) -> (value, end)``.
    """
    raw_decode = json.JSONDecoder(parse_int=_integer, **options).raw_decode

    def decode(text: str, start: int = 0) -> tuple[Any, int]:
        try:
            return raw_decode(text, start)
        except (_LongInteger, RecursionError) as error:
            raise _placed(error, text, start) from None

    return decode


_raw_decode = raw_json_decoder()
_SPACE = re.compile(r'[ \t\n\r]*')


def loads_json(text: str) -> Any:
    """``json.loads(text)``, whose every fault in the text is a :class:`json.JSONDecodeError`
    naming it, its line and column (see :func:`raw_json_decoder`)."""
    value, end = _raw_decode(text, _SPACE.match(text).end())
    end = _SPACE.match(text, end).end()
    if end != len(text):
        raise json.JSONDecodeError('Extra data', text, end)
    return value


def load_json(path: str | os.PathLike) -> Any:
    """The JSON document in the file ``path``, read as UTF-8 (a byte order mark, which Windows
    editors write, dropped).

    Raises:
        OSError: the file cannot be read (``FileNotFoundError``, ...), named by ``open``.
        JSONFileError: it is not UTF-8, or no JSON that Python reads (:func:`loads_json`);
            the message names the file, the fault and where (:func:`json_file_problem`).
    """
    path = Path(path)
    try:
        return loads_json(path.read_text(encoding='utf-8-sig'))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise JSONFileError(json_file_problem(path, error)) from error


def json_file_problem(path: str | os.PathLike,
                      error: UnicodeDecodeError | json.JSONDecodeError) -> str:
    """What ``error``, raised as the file ``path`` was read and decoded, says is wrong with it,
    as ``<path>: not UTF-8: invalid bytes b'\\xe9' on line 3, byte 41; save it as UTF-8`` or
    ``<path>: not a JSON file Python reads: <fault>: line 1 column 5 (char 4)``."""
    if isinstance(error, UnicodeDecodeError):
        return f'{path}: not UTF-8: {first_invalid_utf8(path)}; save it as UTF-8'
    return f'{path}: not a JSON file Python reads: {error}'


def first_invalid_utf8(path: str | os.PathLike) -> str:
    """Where ``path`` first breaks UTF-8, as ``invalid bytes b'\\xe9' on line 3, byte 41``.

    A decoder reading a file a chunk at a time counts its position from the chunk's start, so
    the file is read again, a line at a time (UTF-8 puts no newline byte inside a character).
    """
    offset = 0
    with open(path, 'rb') as file:
        for number, line in enumerate(file, start=1):
            try:
                line.decode('utf-8')
            except UnicodeDecodeError as err:
                return (f'invalid bytes {line[err.start:err.end]!r} on line {number}, '
                        f'byte {offset + err.start}')
            offset += len(line)
    return 'it changed as it was read'


def lone_surrogate(value: Any, where: str) -> str | None:
    """Where a string of the decoded JSON document ``value`` (a key too) holds a lone UTF-16
    surrogate, which a JSON ``\\ud83d`` escape decodes to: half a character (an emoji cut in
    two where the file was written), which no UTF-8 text, file or terminal can hold. ``None``
    when there is none.

    Args:
        value: dicts, lists and scalars, as ``json`` decodes them.
        where: what ``value`` is, prefixed to the message (``'results.json'``).

    Returns:
        ``"<where>['name'][2] holds '\\ud83d' at character 5, half of a UTF-16 surrogate
        pair"``; ``<where>`` alone for ``value`` a string.
    """
    # A stack rather than recursion: the document may nest as deep as the decoder followed.
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, place = stack.pop()
        if isinstance(item, dict):
            for key, member in reversed(item.items()):
                stack.append((member, f'{place}[{key!r}]'))
                stack.append((key, f'{place}: the key {key!r}'))
        elif isinstance(item, list):
            stack.extend((member, f'{place}[{index}]')
                         for index, member in reversed(list(enumerate(item))))
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode('utf-8')
            except UnicodeEncodeError as error:
                return (f'{place} holds {item[error.start]!r} at character {error.start}, '
                        'half of a UTF-16 surrogate pair')
    return None
