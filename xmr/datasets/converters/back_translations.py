"""Back-translations: target-language captions machine-translated into the source language.

PECTVLM's translate-test baseline and its routine 3 query with ``MT(target -> English)``. The
files follow the plain translation format of ``docs/data.md`` with one change of reference:
one file per caption language, line ``i`` translating the ``i``-th caption of *that* language
(items in file order, inside an item its ``captions[lang]`` in order), into ``source_lang``.
:func:`export_captions` writes exactly those lines, so ``export -> translate -> attach`` cannot
misalign.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
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
from xmr.datasets.converters.translations import caption_lines, refuse_copies, texts_of
from xmr.fileio import atomic_write_texts
from xmr.utils.cli import GatherAction, add_custom_imports

__all__ = ['attach_back_translations', 'export_captions', 'main_attach_back']


def _captions_of(ann: Annotation, lang: str) -> list[str]:
    if lang not in ann.languages:
        raise ConversionError(f'{ann.dataset}/{ann.split} has no {lang!r} captions; it has '
                              f'{ann.languages}')
    return [text for record in ann.items for text in record.captions[lang]]


def attach_back_translations(ann: Annotation, files: Mapping[str, str | os.PathLike],
                             overwrite: bool = False) -> Annotation:
    """Join back-translation files (one line per caption of their language) to ``ann``.

    Args:
        ann: an annotation with ``source_lang`` set.
        files: caption language -> file of its captions translated into ``source_lang``.
        overwrite: replace the back-translations of a language ``ann`` already has.

    Returns:
        A new annotation whose records carry ``back_translations[lang]`` for every language of
        ``files`` (added to any already there).

    Raises:
        ConversionError: naming the file and both counts when its line count differs from the
            language's caption count, a language that is the source or has no captions, a
            language back-translated already without ``overwrite``, or a file that repeats its
            language's captions or another language's back-translations line for line
            (:func:`~xmr.datasets.converters.translations.refuse_copies`).
    """
    if ann.source_lang is None:
        raise ConversionError(f'{ann.dataset}/{ann.split} has no source_lang to translate into')
    present = [lang for lang in files if lang in ann.back_translation_langs]
    if present and not overwrite:
        raise ConversionError(f'{ann.dataset}/{ann.split} already has {present} '
                              'back-translations; pass --overwrite (overwrite=True) to replace '
                              'them')
    lines_of: dict[str, list[str]] = {}
    for lang, path in files.items():
        if lang == ann.source_lang:
            raise ConversionError(f'{lang!r} is the source language; it needs no '
                                  'back-translation')
        expected = len(_captions_of(ann, lang))
        lines = read_lines(path, what=f'{lang} back-translation file')
        if len(lines) != expected:
            raise ConversionError(f'{lang} back-translation file {path} has {len(lines)} lines '
                                  f'but {ann.dataset}/{ann.split} has {expected} {lang} captions; '
                                  'write one line per caption, in the order of export_captions')
        lines_of[lang] = lines
    kept = [lang for lang in ann.back_translation_langs if lang not in files]
    refuse_copies(lines_of, files, 'back-translation', {
        **{f'the {lang} captions it translates': partial(texts_of, ann, 'captions', lang)
           for lang in lines_of},
        **{f'the {lang} back-translations {ann.dataset}/{ann.split} holds':
           partial(texts_of, ann, 'back_translations', lang) for lang in kept}})
    cursor = dict.fromkeys(lines_of, 0)
    records = []
    for record in ann.items:
        back = dict(record.back_translations)
        for lang, lines in lines_of.items():
            count = len(record.captions[lang])
            back[lang] = lines[cursor[lang]:cursor[lang] + count]
            cursor[lang] += count
        records.append(replace(record, back_translations=back))
    langs = list(ann.back_translation_langs) + [lang for lang in files
                                                if lang not in ann.back_translation_langs]
    return replace(ann, items=records, back_translation_langs=langs)


def export_captions(ann: Annotation, files: Mapping[str, str | os.PathLike]) -> dict[str, int]:
    """Write the captions of each language of ``files`` one per line, the order
    back-translations follow: every file or none.

    Args:
        ann: the annotation.
        files: caption language -> the file to write its captions to.

    Returns:
        The number of lines written, by language.

    Raises:
        ConversionError: a language ``ann`` has no captions in, or a caption holding a line
            break (it would shift every later line); no file is written then.
    """
    lines = {path: caption_lines(_captions_of(ann, lang), lang, ann)
             for lang, path in files.items()}
    atomic_write_texts(lines)
    return {lang: len(_captions_of(ann, lang)) for lang in files}


def main_attach_back(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/attach_back_translations.py``.

    ``--export`` keeps a file standing at a ``PATH`` unless ``--overwrite`` is given
    (:func:`~xmr.datasets.converters.cli.refuse_standing_text`): nothing in a file of lines
    tells an earlier export from the translation made of it.
    """
    parser = argparse.ArgumentParser(description='Join target-language captions machine-'
                                     'translated into the source language (one line per '
                                     'caption) to an xmr annotation file.')
    parser.add_argument('ann', type=Path, help='annotation file')
    parser.add_argument('--back-translations', nargs='+', action=GatherAction, metavar='LANG=PATH',
                        help='back-translation file per caption language')
    parser.add_argument('--export', nargs='+', action=GatherAction, metavar='LANG=PATH',
                        help='instead, write the LANG captions to translate, one per line; a '
                        'file standing at PATH is kept unless --overwrite is given')
    parser.add_argument('--out', type=Path, help=ATTACH_OUT_HELP)
    parser.add_argument('--overwrite', action='store_true',
                        help='replace the back-translations of a language the file already '
                        'has; with --export, a file standing at PATH, an earlier export (an '
                        'annotation or a binary file is kept even so)')
    add_custom_imports(parser)
    args = parser.parse_args(argv)
    if (args.back_translations is None) == (args.export is None):
        parser.error('give exactly one of --back-translations or --export')
    try:
        if args.export is not None:
            files = parse_lang_paths(args.export, '--export')
            outputs = {f'--export {lang}': path for lang, path in files.items()}
            refuse_written_over(outputs, {'ANN': args.ann})
            refuse_standing_text(outputs, args.overwrite)
            for lang, count in export_captions(load_annotation(args.ann), files).items():
                print(f'{files[lang]}: {count} {lang} captions')
            return
        files = parse_lang_paths(args.back_translations, '--back-translations')
        refuse_written_over({'--out': args.out or args.ann}, {
            f'--back-translations {lang}': path for lang, path in files.items()})
        ann = load_annotation(args.ann)
        # Checked before the files are read: any other file at --out was written over.
        out = attach_out(args.out, args.ann, ann)
        ann = attach_back_translations(ann, files, args.overwrite)
        # An --out holding languages attached since keeps them: it is refused.
        dump_converted({out: ann}, 'give --out another file')
    except (ConversionError, AnnotationError, FileNotFoundError) as err:
        raise SystemExit(f'error: {err}') from err
    print(f'{args.out or args.ann}: back-translations for {", ".join(files)} attached to '
          f'{len(ann.items)} items')
