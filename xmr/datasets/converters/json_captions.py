"""Helpers for releases whose captions come inside JSON or CSV files (COCO, STAIR, MSR-VTT).

Line-based releases keep every caption byte for byte. Captions taken out of JSON/CSV fields are
the exception: a few of them carry stray line breaks or surrounding blanks, which would break the
one-caption-per-line translation format, so :func:`clean_caption` folds line breaks (every
boundary ``str.splitlines`` breaks at, U+2028 and NEL among them) into one space and strips the
ends.
"""
from __future__ import annotations

import os
import re
from typing import Any

from xmr.datasets.annotation import shows_nothing
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.raw_files import blank_detail, require_file
from xmr.json_files import JSONFileError, load_json, lone_surrogate

__all__ = ['clean_caption', 'integer_id', 'read_json']

# Every boundary str.splitlines breaks at: Unicode's line and paragraph separators and NEL
# split a line for a translation tool that reads with it as a newline does.
_LINE_BREAKS = re.compile(r'\s*[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]+\s*')


def clean_caption(text: Any, where: str) -> str:
    """Fold line breaks into a space and strip; stop on a non-string or empty caption (one of
    invisible characters alone, such as U+200B, too), or one holding half a character (a lone
    UTF-16 surrogate), which no UTF-8 file can hold.

    Args:
        text: the raw field value.
        where: file and record, named in the error.
    """
    if not isinstance(text, str):
        raise ConversionError(f'{where}: caption must be a string, got {text!r}')
    surrogate = lone_surrogate(text, f'{where}: the caption')
    if surrogate is not None:
        # Refused here, naming the release's record: the annotation refuses it only as it is
        # written, naming the output's item and telling to repair a text it does not hold.
        raise ConversionError(f'{surrogate} (a JSON escape such as \\ud83d without its other '
                              'half: an emoji cut in two): repair the release file, or report it '
                              'to its authors')
    cleaned = _LINE_BREAKS.sub(' ', text).strip()
    if shows_nothing(cleaned):
        # Invisible characters alone (U+200B) are refused here, naming the release's record,
        # not as the annotation is written, naming its item.
        raise ConversionError(f'{where}: caption is empty{blank_detail(cleaned)}')
    return cleaned


def integer_id(value: Any, where: str, key: str) -> int:
    """A record's ``key`` field as an integer id: a JSON integer or a string of digits, never a
    boolean, a fraction or ``null`` (``int()`` would take ``True`` and ``1.5`` as ``1``).

    Raises:
        ConversionError: naming ``where``, the key and the value.
    """
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ConversionError(f'{where} has {key} {value!r}, not an integer')


def read_json(path: str | os.PathLike, what: str) -> Any:
    """Parse a JSON file, naming it (and its role) when it is missing or malformed.

    A byte order mark is dropped, as :func:`read_lines` drops it from caption files.

    Raises:
        ConversionError: the file is missing, not UTF-8, or no JSON that Python reads (an
            integer too long, arrays nested too deep among them), naming its role, the file,
            the fault and its line and column (:func:`~xmr.json_files.load_json`).
    """
    path = require_file(path, what)
    try:
        return load_json(path)
    except JSONFileError as err:
        raise ConversionError(f'{what} {err}') from err
