"""Machine-translated training captions in a plain line format, joined to an annotation.

The format (``docs/data.md``): one UTF-8 text file per target language (``.gz`` allowed), one
translation per line, line ``i`` translating the ``i``-th source caption of the annotation, i.e.
``Annotation.source_captions()[i]``: items in file order, and inside an item its
``captions[source_lang]`` in order. :func:`export_source_captions` writes exactly those lines, so
``export -> translate line by line -> attach`` cannot misalign.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

from xmr.datasets.annotation import (
    Annotation,
    AnnotationError,
    load_annotation,
)
from xmr.datasets.converters.cli import (
    ATTACH_OUT_HELP,
    attach_out,
    dump_converted,
    refuse_standing_text,
    refuse_written_over,
)
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.raw_files import parse_lang_paths, read_lines
from xmr.fileio import atomic_write_text
from xmr.utils.cli import GatherAction, add_custom_imports

__all__ = ['attach_translations', 'export_source_captions', 'main_attach', 'main_export',
           'refuse_copies', 'texts_of']


def attach_translations(ann: Annotation, files: Mapping[str, str | os.PathLike],
                        overwrite: bool = False) -> Annotation:
    """Join translation files to the source captions of ``ann``.

    Args:
        ann: an annotation with ``source_lang`` set.
        files: target language -> translation file (one line per source caption).
        overwrite: replace the translations of a language ``ann`` already has.

    Returns:
        A new annotation whose records carry ``translations[lang]`` for every language of
        ``files`` (added to any translations already there).

    Raises:
        ConversionError: if a file is missing, malformed, or its line count differs from the
            number of source captions (the message names the file and both counts), a
            language already translated without ``overwrite``, or a file that repeats the
            source captions or another language's translations line for line
            (:func:`refuse_copies`).
    """
    if ann.source_lang is None:
        raise ConversionError(f'{ann.dataset}/{ann.split} has no source_lang; cannot align '
                              'translations with it')
    present = [lang for lang in files if lang in ann.translation_langs]
    if present and not overwrite:
        raise ConversionError(f'{ann.dataset}/{ann.split} already has {present} translations; '
                              'pass --overwrite (overwrite=True) to replace them')
    for lang in files:
        if lang == ann.source_lang:
            raise ConversionError(f'translation language {lang!r} is the source language')
    sources = ann.source_captions()
    translated: dict[str, list[str]] = {}
    for lang, path in files.items():
        lines = read_lines(path, what=f'{lang} translation file')
        if len(lines) != len(sources):
            raise ConversionError(
                f'{lang} translation file {path} has {len(lines)} lines but '
                f'{ann.dataset}/{ann.split} has {len(sources)} {ann.source_lang} source captions; '
                'write one translation per line, in the order of export_source_captions')
        translated[lang] = lines
    kept = [lang for lang in ann.translation_langs if lang not in files]
    refuse_copies(translated, files, 'translation', {
        f'the {ann.source_lang} source captions it translates': lambda: sources,
        **{f'the {lang} translations {ann.dataset}/{ann.split} holds':
           partial(texts_of, ann, 'translations', lang) for lang in kept}})
    records = []
    cursor = 0
    for record in ann.items:
        count = len(record.captions[ann.source_lang])
        translations = dict(record.translations)
        for lang, lines in translated.items():
            translations[lang] = lines[cursor:cursor + count]
        records.append(replace(record, translations=translations))
        cursor += count
    langs = list(ann.translation_langs) + [lang for lang in files
                                           if lang not in ann.translation_langs]
    return replace(ann, items=records, translation_langs=langs)


def refuse_copies(lines_of: Mapping[str, Sequence[str]], files: Mapping[str, str | os.PathLike],
                  kind: str, known: Mapping[str, Callable[[], Iterable[str]]]) -> None:
    """Refuse a translation file that repeats, line for line, another file given with it or a
    text list the annotation holds: a release's file copied under another language's name
    (PECTVLM's XTD10 ``translated_from_en/ko.txt`` is its ``it.txt``, byte for byte), or the
    file to translate given as its translation. Attached, it trains or queries a language on
    another language's text, or on the untranslated text, and nothing says so.

    Args:
        lines_of: language -> the file's lines, as read.
        files: language -> the file, for the message.
        kind: what the files hold (``'translation'``, ``'back-translation'``).
        known: what else they must not repeat (``'the en source captions it translates'``)
            -> a function giving its texts in the files' line order, walked until the first
            line that differs (no list of a CC3M annotation's texts is built).

    Raises:
        ConversionError: naming the file, its language and what it repeats; nothing is
            attached.
    """
    seen = dict(known)
    for lang, lines in lines_of.items():
        for name, texts in seen.items():
            if _same_lines(lines, texts()):
                raise ConversionError(
                    f'{lang} {kind} file {files[lang]} repeats {name} line for line: a file of '
                    f'another language copied under its name, or text not translated; give '
                    f'the {lang} {kind}s')
        seen[f'the {lang} {kind} file {files[lang]}'] = lambda lines=lines: lines


def _same_lines(lines: Sequence[str], texts: Iterable[str]) -> bool:
    """Whether ``texts`` holds exactly ``lines``, read up to its first other line."""
    texts = iter(texts)
    return all(next(texts, None) == line for line in lines) and next(texts, None) is None


def export_source_captions(ann: Annotation, path: str | os.PathLike) -> int:
    """Write the source captions of ``ann`` one per line, the order translations must follow.

    Returns:
        The number of lines written.

    Raises:
        ConversionError: if a caption holds a line break (it would shift every later line).
    """
    return write_caption_lines(ann.source_captions(), path, 'source', ann)


def write_caption_lines(captions: Sequence[str], path: str | os.PathLike, kind: str,
                        ann: Annotation) -> int:
    """Write ``captions`` one per line (atomically), the layout translation files follow.

    Args:
        captions: the captions, in order.
        path: the file to write.
        kind: which captions of ``ann`` these are (``'source'``, a language code), for errors.
        ann: the annotation they come from, for errors.

    Returns:
        The number of lines written.

    Raises:
        ConversionError: if a caption holds a line break (it would shift every later line).
    """
    atomic_write_text(path, caption_lines(captions, kind, ann))
    return len(captions)


def texts_of(ann: Annotation, key: str, lang: str) -> Iterator[str]:
    """The ``key`` texts (``'captions'``, ``'translations'``, ``'back_translations'``) of
    ``lang`` of every record of ``ann``, in file order: the order of a line file of them."""
    return (text for record in ann.items for text in getattr(record, key)[lang])


def caption_lines(captions: Sequence[str], kind: str, ann: Annotation) -> Iterator[str]:
    """The lines of :func:`write_caption_lines`' file, made as they are written, once every
    caption is checked (a line at a time: a text joined first held each caption again).

    Raises:
        ConversionError: if a caption holds a line break (it would shift every later line).
    """
    for number, text in enumerate(captions, start=1):
        # Each boundary str.splitlines breaks at (U+2028, NEL, ...): a tool reading the file so
        # would cut the caption there.
        if len(f'{text}\n'.splitlines()) > 1:
            raise ConversionError(f'{kind} caption {number} of {ann.dataset}/{ann.split} holds '
                                  f'a line break: {text!r}')
    return (text + '\n' for text in captions)


def main_attach(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/attach_translations.py``."""
    parser = argparse.ArgumentParser(description='Join machine-translated caption files (one '
                                     'line per source caption) to an xmr annotation file.')
    parser.add_argument('ann', type=Path, help='annotation file with source captions')
    parser.add_argument('--translations', nargs='+', action=GatherAction,
                        required=True, metavar='LANG=PATH',
                        help='translation file per target language')
    parser.add_argument('--out', type=Path, help=ATTACH_OUT_HELP)
    parser.add_argument('--overwrite', action='store_true',
                        help='replace the translations of a language the file already has')
    add_custom_imports(parser)
    args = parser.parse_args(argv)
    try:
        files = parse_lang_paths(args.translations, '--translations')
        refuse_written_over({'--out': args.out or args.ann},
                            {f'--translations {lang}': path for lang, path in files.items()})
        ann = load_annotation(args.ann)
        # Checked before the files are read: any other file at --out was written over.
        out = attach_out(args.out, args.ann, ann)
        ann = attach_translations(ann, files, args.overwrite)
        # An --out holding languages attached since keeps them: it is refused.
        dump_converted({out: ann}, 'give --out another file')
    except (ConversionError, AnnotationError, FileNotFoundError) as err:
        raise SystemExit(f'error: {err}') from err
    print(f'{args.out or args.ann}: translations for {", ".join(files)} attached to '
          f'{len(ann.items)} items')


def main_export(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/export_source_captions.py``.

    A file standing at ``OUT`` is kept unless ``--overwrite`` is given
    (:func:`~xmr.datasets.converters.cli.refuse_standing_text`): nothing in a file of lines
    tells an earlier export from the translation made of it.
    """
    parser = argparse.ArgumentParser(description='Write the source captions of an xmr '
                                     'annotation file one per line, ready for translation.')
    parser.add_argument('ann', type=Path, help='annotation file')
    parser.add_argument('out', type=Path, help='text file to write; a file standing there is '
                        'kept unless --overwrite is given')
    parser.add_argument('--overwrite', action='store_true',
                        help='replace a file standing at OUT, an earlier export (nothing in a '
                        'file of lines tells it from a translation of one); an annotation or a '
                        'binary file is kept even so')
    add_custom_imports(parser)
    args = parser.parse_args(argv)
    try:
        refuse_written_over({'OUT': args.out}, {'ANN': args.ann})
        refuse_standing_text({'OUT': args.out}, args.overwrite)
        count = export_source_captions(load_annotation(args.ann), args.out)
    except (ConversionError, AnnotationError, FileNotFoundError) as err:
        raise SystemExit(f'error: {err}') from err
    print(f'{args.out}: {count} source captions')
