"""Reading the plain files of the raw releases, with checks that name the file at fault.

Caption files of the public releases are one caption per line, sometimes gzipped, sometimes with
Windows line ends, sometimes without a final newline (seven of XTD10's). :func:`read_lines`
accepts all of these and returns every caption exactly as written: only the line terminator is
removed, so non-ASCII text survives byte for byte.
"""
from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from xmr.datasets.annotation import MediaRecord, shows_nothing
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.languages import LanguageCodeError, normalize_languages
from xmr.datasets.media_files import missing_media, other_spelling_hint

__all__ = ['read_lines', 'iter_lines', 'require_file', 'find_first', 'blank_detail',
           'require_same_length',
           'parallel_caption_records',
           'check_media_exist', 'parse_lang_paths', 'canonical_languages']

_UTF8_BOM = '\ufeff'


def require_file(path: str | os.PathLike, what: str) -> Path:
    """Return ``path`` as a :class:`Path` if it is a file, else stop naming it and its role."""
    path = Path(path)
    if not path.is_file():
        raise ConversionError(f'{what} not found: {path}')
    return path


def find_first(directory: str | os.PathLike, names: Sequence[str], what: str) -> Path:
    """The first of ``names`` that exists in ``directory`` (e.g. ``train.en.gz``, ``train.en``)."""
    directory = Path(directory)
    for name in names:
        if (directory / name).is_file():
            return directory / name
    raise ConversionError(f'{what} not found in {directory}: looked for {", ".join(names)}')


def read_lines(path: str | os.PathLike, what: str = 'caption file') -> list[str]:
    """Read a UTF-8 text file (``.gz`` transparently) as a list of lines.

    Line terminators (``\\n`` or ``\\r\\n``) are removed, a final newline is optional, a UTF-8 byte
    order mark at the start is dropped; nothing else of a line changes.

    Args:
        path: the file.
        what: its role, named in errors (``caption file``, ``image list``).

    Returns:
        One string per line.

    Raises:
        ConversionError: if the file is missing, not UTF-8, empty, or has a blank line (one of
            whitespace and invisible characters alone, such as U+200B, included).
    """
    lines = list(iter_lines(path, what))
    if not lines:
        raise ConversionError(f'{what} {Path(path)} is empty')
    return lines


def iter_lines(path: str | os.PathLike, what: str = 'caption file',
               allow_empty_lines: bool = False) -> Iterator[str]:
    """The lines of :func:`read_lines`, decoded one at a time: reading a file holds one line
    of it, not its bytes and its text beside the lines kept (twice a translation file's lines),
    and a reader that wants the first lines stops reading there. A file without a line yields
    nothing; ``allow_empty_lines`` yields blank lines instead of stopping at the first one.

    Raises:
        ConversionError: as :func:`read_lines`, when the line at fault is reached.
    """
    path = require_file(path, what)
    opener = gzip.open if path.suffix == '.gz' else open
    try:
        with opener(path, 'rb') as handle:
            # UTF-8 never puts the byte of a newline inside a character: splitting the bytes
            # at b'\n' splits the text at its line ends.
            for number, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode('utf-8')
                except UnicodeDecodeError as err:
                    raise ConversionError(f'{what} {path} is not UTF-8 (invalid bytes on line '
                                          f'{number})') from err
                if number == 1 and line.startswith(_UTF8_BOM):
                    line = line[1:]
                    if not line:  # a byte order mark alone
                        return
                line = line[:-1] if line.endswith('\n') else line
                line = line[:-1] if line.endswith('\r') else line
                if not allow_empty_lines and shows_nothing(line):
                    # A line of invisible characters alone (a zero-width space a translation
                    # tool left) is empty to the annotation too, which named only its item.
                    raise ConversionError(f'{what} {path} has an empty line {number}'
                                          f'{blank_detail(line)}')
                yield line
    except (OSError, EOFError, zlib.error) as err:  # zlib.error: damage inside a .gz's data
        raise ConversionError(f'{what} {path} cannot be read: {err}') from err


def blank_detail(text: str) -> str:
    """What a blank text holds, for a message: ``''`` for whitespace alone, else its code
    points (`` (only U+200B)``), since a line of invisible characters looks empty."""
    shown = [f'U+{ord(char):04X}' for char in text if not char.isspace()]
    return f' (only {" ".join(shown)})' if shown else ''


def require_same_length(reference: tuple[Path, int], files: Mapping[Path, Sequence[str]]
                        ) -> None:
    """Stop unless every caption file has as many lines as the image list.

    Args:
        reference: the image list the caption files align with, and its line count.
        files: caption file -> its lines.

    Raises:
        ConversionError: naming the first file that differs and both counts.
    """
    reference_path, expected = reference
    for path, lines in files.items():
        if len(lines) != expected:
            raise ConversionError(
                f'caption file {path} has {len(lines)} lines but image list {reference_path} has '
                f'{expected}; line i of both must describe the same media')


def refuse_repeats(keys: Iterable[str], where: str, what: str, first_line: int = 1) -> None:
    """Stop at the first of ``keys`` (one per line of a release file, from ``first_line``) that
    an earlier line holds: the annotation would refuse it naming only the file it writes.

    Raises:
        ConversionError: ``<where> line <n> repeats <what> <key> of line <m>``.
    """
    seen: dict[str, int] = {}
    for number, key in enumerate(keys, start=first_line):
        earlier = seen.setdefault(key, number)
        if earlier != number:
            raise ConversionError(f'{where} line {number} repeats {what} {key!r} of line '
                                  f'{earlier}')


def check_media_exist(media_root: str | os.PathLike, relative_paths: Iterable[str],
                      what: str = 'image') -> None:
    """Stop unless every media file exists under ``media_root`` (one listing per folder,
    :func:`~xmr.datasets.media_files.missing_media`).

    Raises:
        ConversionError: naming a missing folder and the options to give instead, or the first
            missing file's full path and how many are missing.
    """
    if not Path(media_root).is_dir():
        # Captions usually arrive before the media: name the way to convert without them.
        raise ConversionError(f'{what} folder not found: {media_root}: check --{what}s-dir, or '
                              f'pass --skip-media-check to convert without the {what}s')
    missing = missing_media(media_root, relative_paths)
    if missing:
        more = f' and {len(missing) - 1} more' if len(missing) > 1 else ''
        raise ConversionError(f'{what} file not found: {missing[0]}{more}'
                              f'{other_spelling_hint(missing[0])}')


def parse_lang_paths(pairs: Sequence[str] | None, option: str,
                     key_name: str = 'LANG') -> dict[str, Path]:
    """Parse ``LANG=PATH`` (or ``<key_name>=PATH``) command-line values into a mapping.

    A ``LANG`` is taken in any accepted form and keyed by its canonical code (``DE``, ``deu``
    -> ``de``).

    Raises:
        ConversionError: naming the option and the malformed value or unknown language.
    """
    parsed: dict[str, Path] = {}
    for pair in pairs or []:
        lang, sep, path = pair.partition('=')
        if not sep or not lang or not path:
            raise ConversionError(f'{option} expects {key_name}=PATH, got {pair!r}')
        if key_name == 'LANG':
            lang = canonical_languages([lang], option)[0]
        elif not re.fullmatch(r'[A-Za-z0-9][A-Za-z0-9_.-]*', lang):
            # The name goes into output file names: no path of its own.
            raise ConversionError(f'{option}: {key_name} {lang!r} in {pair!r} must be letters, '
                                  "digits, '_', '.' or '-', starting with a letter or digit")
        if lang in parsed:
            raise ConversionError(f'{option} names {lang!r} twice')
        parsed[lang] = Path(path)
    return parsed


def canonical_languages(codes: Sequence[str], option: str) -> list[str]:
    """The canonical codes of languages asked for on a command line (``jp`` -> ``ja``).

    Raises:
        ConversionError: naming the option, the code and the accepted forms.
    """
    try:
        return normalize_languages(list(codes), option)
    except LanguageCodeError as error:
        raise ConversionError(str(error)) from error


def parallel_caption_records(list_path: Path, names: Sequence[str], paths: Sequence[str],
                             files: Mapping[str, Path]) -> list[MediaRecord]:
    """One record per line of an image list, with line ``i`` of each language's caption file.

    Args:
        list_path: the image list, for the messages.
        names: its lines (their stems are the media ids).
        paths: each image's ``media_path``, in the list's order.
        files: ``{lang: caption file}``, one caption per line, aligned with the list.

    Raises:
        ConversionError: a caption file is missing or its length differs from the list's, or
            the list names an image twice (both lines named).
    """
    first_line: dict[str, int] = {}
    for number, name in enumerate(names, 1):
        line = first_line.setdefault(Path(name).stem, number)
        if line != number:
            raise ConversionError(f'image list {list_path} names {name} twice, on lines {line} '
                                  f'and {number}')
    captions = {path: read_lines(path) for path in files.values()}
    require_same_length((list_path, len(names)), captions)
    return [MediaRecord(media_id=Path(name).stem, media_path=path,
                        captions={lang: [captions[file][i]] for lang, file in files.items()})
            for i, (name, path) in enumerate(zip(names, paths))]
