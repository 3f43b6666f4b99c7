"""Crossmodal-3600 (XM3600) to an xmr annotation.

Raw release layout (google.github.io/crossmodal-3600)::

    captions.jsonl     one JSON object per image and line: {"image/key": "000411001ff7dd4f",
                       "<lang>": {"caption": [...], "caption/tokenized": [...], ...}, ...}
                       for the 36 languages below
    images/<key>.jpg   the 3,600 images

Output: ``crossmodal3600_test.json``, every image with *all* its captions in every language (1 to
2 per language, as released, in the release's order), keyed by the image key. The caption files
use xmr's canonical codes already (``fil``, ``quz``, ``no``, ``he``). CLIP_benchmark evaluates
only the first caption of each image: the ``crossmodal3600_first_caption`` protocol of
:class:`~xmr.evaluation.RetrievalMetric` reads that one from the same file.
"""
from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xmr.datasets.annotation import Annotation, MediaRecord
from xmr.datasets.converters.cli import (
    add_media_options,
    add_out_dir,
    checked_media_dir,
    write_converted,
)
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.json_captions import clean_caption
from xmr.datasets.converters.raw_files import (
    canonical_languages,
    check_media_exist,
    read_lines,
    refuse_repeats,
)
from xmr.json_files import loads_json
from xmr.utils.cli import GatherAction, add_custom_imports

__all__ = ['XM3600_LANGUAGES', 'convert_crossmodal3600', 'main']

XM3600_LANGUAGES = ('ar', 'bn', 'cs', 'da', 'de', 'el', 'en', 'es', 'fa', 'fi', 'fil', 'fr', 'he',
                    'hi', 'hr', 'hu', 'id', 'it', 'ja', 'ko', 'mi', 'nl', 'no', 'pl', 'pt', 'quz',
                    'ro', 'ru', 'sv', 'sw', 'te', 'th', 'tr', 'uk', 'vi', 'zh')


def convert_crossmodal3600(captions_file: str | os.PathLike,
                           images_dir: str | os.PathLike | None = None,
                           languages: Sequence[str] = XM3600_LANGUAGES) -> Annotation:
    """Build the Crossmodal-3600 annotation with all captions of the chosen languages.

    Args:
        captions_file: the release's ``captions.jsonl``.
        images_dir: the ``images/`` folder; when given, every ``<key>.jpg`` must exist.
        languages: languages to convert, in any accepted form (``sw``, ``swh_Latn``).

    Raises:
        ConversionError: naming the file, the line and the key at fault.
    """
    languages = canonical_languages(languages, '--languages')
    unknown = [lang for lang in languages if lang not in XM3600_LANGUAGES]
    if unknown:
        raise ConversionError(f'Crossmodal-3600 has no captions in {unknown}; its languages are '
                              f'{list(XM3600_LANGUAGES)}')
    records = [_record(line, f'captions file {captions_file} line {number}', languages)
               for number, line in enumerate(read_lines(captions_file, 'captions file'), 1)]
    refuse_repeats([record.media_id for record in records], f'captions file {captions_file}',
                   'image/key')
    if images_dir is not None:
        check_media_exist(images_dir, [record.media_path for record in records])
    source_lang = 'en' if 'en' in languages else None
    return Annotation(dataset='crossmodal3600', split='test', media_type='image',
                      languages=languages, items=records, source_lang=source_lang)


def _record(line: str, where: str, languages: Sequence[str]) -> MediaRecord:
    try:
        # loads_json: a number too long or arrays nested too deep are JSONDecodeErrors too,
        # at their column, not a bare ValueError or RecursionError naming no line.
        data: Any = loads_json(line)
    except json.JSONDecodeError as err:
        raise ConversionError(f'{where} is not a JSON object: {err}') from err
    if not isinstance(data, dict) or not isinstance(data.get('image/key'), str):
        raise ConversionError(f"{where}: expected an object with a string 'image/key'")
    key = data['image/key']
    return MediaRecord(media_id=key, media_path=f'{key}.jpg',
                       captions={lang: _captions(data, lang, f'{where} (image {key})')
                                 for lang in languages})


def _captions(data: Mapping[str, Any], lang: str, where: str) -> list[str]:
    entry = data.get(lang)
    texts = entry.get('caption') if isinstance(entry, dict) else None
    if not isinstance(texts, list) or not texts:
        raise ConversionError(f"{where}: no captions under [{lang!r}]['caption']")
    return [clean_caption(text, f"{where}: [{lang!r}]['caption'][{k}]")
            for k, text in enumerate(texts)]


def main(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/prepare_crossmodal3600.py``."""
    parser = argparse.ArgumentParser(description='Convert the Crossmodal-3600 release '
                                     '(captions.jsonl) to an xmr annotation (docs/data.md).')
    parser.add_argument('--captions', type=Path, required=True, help="the release's "
                        'captions.jsonl')
    add_media_options(parser, 'images', 'folder of the <image key>.jpg files')
    add_out_dir(parser)
    parser.add_argument('--languages', nargs='+', action=GatherAction,
                        default=list(XM3600_LANGUAGES),
                        help='languages to keep, in any accepted form (sw, swh_Latn) '
                        "(default: the release's 36)")
    add_custom_imports(parser)
    args = parser.parse_args(argv)
    images_dir = checked_media_dir(parser, args, 'images')
    write_converted(lambda: {'crossmodal3600_test': convert_crossmodal3600(
        args.captions, images_dir, args.languages)},
        args.out_dir, 'images', lambda: {'crossmodal3600_test': 'crossmodal3600'},
        text_only=args.text_only, check_benchmark_size=not args.skip_benchmark_size_check)
