"""Conceptual Captions with UC2's machine translations (CC3M) and its seeded subset CC300K.

Raw files: UC2's translated TSVs, one per language (``train_imageId2Ann_{lang}.tsv`` by default),
each row ``id \\t url \\t caption \\t status``. ``status`` is ``success`` or ``fail``: a failed
row has no caption and is left out. English holds the original captions; every other language
holds their machine translations, which become the ``translations`` of the English source
captions. An image is kept when every requested language has a successful row for it (and, with
an image folder, when its file exists). Images are named ``{id:08d}.jpg`` by default (the layout
of the crawled images used by UC2, MLA and DASD).

``subset_size`` draws a seeded random subset of the kept ids (``random.Random(seed).sample``
over the ids in ascending order; CC300K = 300,000) and writes it in ascending id order.
"""
from __future__ import annotations

import argparse
import os
import random
import warnings
from collections import Counter, defaultdict
from collections.abc import Container, Iterator, Mapping, Sequence
from pathlib import Path

from xmr.datasets.annotation import Annotation, AnnotationError, MediaRecord
from xmr.datasets.converters.cli import (
    dump_converted,
    refuse_other_file,
    refuse_written_over,
)
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.raw_files import canonical_languages, read_lines
from xmr.datasets.media_files import missing_media
from xmr.utils.cli import GatherAction, add_custom_imports, int_at_least

__all__ = ['UC2_LANGUAGES', 'uc2_rows', 'read_uc2_tsv', 'convert_cc3m', 'main']

UC2_LANGUAGES = ('en', 'de', 'fr', 'cs', 'zh', 'ja')
_STATUSES = ('success', 'fail')


def uc2_rows(path: str | os.PathLike) -> Iterator[tuple[str, str]]:
    """``(image id, caption)`` of each successful row of one UC2 TSV, in file order.

    Raises:
        ConversionError: naming the file and line of a malformed row.
    """
    for number, line in enumerate(read_lines(path, what='UC2 TSV'), start=1):
        fields = line.split('\t')
        if len(fields) != 4:
            raise ConversionError(f'UC2 TSV {path} line {number} has {len(fields)} tab-separated '
                                  'fields, expected 4 (id, url, caption, status)')
        image_id, _, caption, status = fields
        if status not in _STATUSES:
            raise ConversionError(f'UC2 TSV {path} line {number} has status {status!r}, '
                                  f'expected one of {_STATUSES}')
        if not (image_id.isascii() and image_id.isdigit()):
            raise ConversionError(f'UC2 TSV {path} line {number} has id {image_id!r}, '
                                  'expected a number')
        if status == 'fail':
            continue
        if not caption.strip():
            raise ConversionError(f'UC2 TSV {path} line {number} is marked success but has '
                                  'no caption')
        yield image_id, caption


def read_uc2_tsv(path: str | os.PathLike,
                 ids: Container[str] | None = None) -> dict[str, list[str]]:
    """Captions per image id of one UC2 TSV, failed rows dropped (of ``ids`` alone if given).

    Raises:
        ConversionError: naming the file and line of a malformed row.
    """
    captions: dict[str, list[str]] = defaultdict(list)
    for image_id, caption in uc2_rows(path):
        if ids is None or image_id in ids:
            captions[image_id].append(caption)
    return dict(captions)


def _aligned_ids(paths: Mapping[str, Path], source: str) -> list[str]:
    """The ids with a caption in every language, ascending, counted a file at a time (the
    captions are read once the images are chosen: CC3M's six tables held whole took 8.5 GB
    for the 150 MB of CC300K).

    Raises:
        ConversionError: a kept id whose captions in a target language are not as many as in
            the source (the smallest such id, its first such language).
    """
    counts = Counter(image_id for image_id, _ in uc2_rows(paths[source]))
    unaligned = []
    for order, (lang, path) in enumerate(paths.items()):
        if lang == source:
            continue
        theirs = Counter(image_id for image_id, _ in uc2_rows(path) if image_id in counts)
        unaligned += [(int(image_id), order, image_id, lang, number)
                      for image_id, number in theirs.items() if number != counts[image_id]]
        counts = Counter({image_id: counts[image_id] for image_id in theirs})
    unaligned = [entry for entry in unaligned if entry[2] in counts]
    if unaligned:
        _, _, image_id, lang, number = min(unaligned)
        raise ConversionError(
            f'UC2 TSV {paths[lang]} has {number} captions for id {image_id} but the {source} '
            f'file has {counts[image_id]}; translations must align with the source captions')
    return sorted(counts, key=int)


def convert_cc3m(uc2_dir: str | os.PathLike, languages: Sequence[str] = UC2_LANGUAGES,
                 images_dir: str | os.PathLike | None = None, subset_size: int | None = None,
                 seed: int = 0, tsv_pattern: str = 'train_imageId2Ann_{lang}.tsv',
                 image_name_format: str = '{id:08d}.jpg', split: str = 'train',
                 ) -> Annotation:
    """Build the CC3M (or, with ``subset_size``, CC300K) training annotation.

    Args:
        uc2_dir: folder with the TSVs.
        languages: the first is the source (``en``), the rest its translations.
        images_dir: image folder; when given, images without a file are left out with a
            warning that counts them (CC3M's URLs rot, so no crawl has every image).
        subset_size: size of the seeded subset, or ``None`` for every kept image.
        seed: seed of the subset.
        tsv_pattern: file name of a language's TSV, with ``{lang}``.
        image_name_format: file name of an image, with ``{id}`` (an int).
        split: the split name written into the annotation.

    Raises:
        ConversionError: on malformed files, mismatching caption counts, or a subset size that
            is no whole number >= 1 or larger than the kept images.
    """
    if subset_size is not None and (isinstance(subset_size, bool) or not isinstance(
            subset_size, int) or subset_size < 1):
        raise ConversionError(f'subset_size={subset_size!r}: give a whole number of images >= 1 '
                              '(CC300K: 300000), or None for every image')
    uc2_dir = Path(uc2_dir)
    # UC2 names its files by the canonical codes (en.tsv, ja.tsv).
    languages = canonical_languages(languages, '--languages')
    source, targets = languages[0], list(languages[1:])
    paths = {lang: uc2_dir / tsv_pattern.format(lang=lang) for lang in languages}
    kept = _aligned_ids(paths, source)
    names = {image_id: image_name_format.format(id=int(image_id)) for image_id in kept}
    if images_dir is not None:
        images_dir = Path(images_dir)
        if not images_dir.is_dir():
            raise ConversionError(f'image folder not found: {images_dir}: check --images-dir, '
                                  'or leave it out to keep every image the TSVs list')
        absent = set(missing_media(images_dir, names.values()))
        missing = [image_id for image_id in kept if images_dir / names[image_id] in absent]
        if missing:
            warnings.warn(f'{len(missing)} of {len(kept)} images have no file in {images_dir} '
                          f'(first: {names[missing[0]]}); they are left out')
        left_out = set(missing)
        kept = [image_id for image_id in kept if image_id not in left_out]
    if subset_size is not None:
        if subset_size > len(kept):
            raise ConversionError(f'subset of {subset_size} images asked for, but only '
                                  f'{len(kept)} images have captions in {list(languages)}'
                                  f'{" and a file" if images_dir is not None else ""}')
        kept = sorted(random.Random(seed).sample(kept, subset_size), key=int)
    if not kept:
        raise ConversionError(f'no image of {uc2_dir} has captions in every language of '
                              f'{list(languages)}')
    chosen = set(kept)
    tables = {lang: read_uc2_tsv(path, chosen) for lang, path in paths.items()}
    records = [MediaRecord(media_id=image_id, media_path=names[image_id],
                           captions={source: tables[source][image_id]},
                           translations={lang: tables[lang][image_id] for lang in targets})
               for image_id in kept]
    return Annotation(dataset='cc3m', split=split, media_type='image', languages=[source],
                      items=records, source_lang=source, translation_langs=targets)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/prepare_cc3m.py``."""
    parser = argparse.ArgumentParser(description="Convert UC2's translated Conceptual Captions "
                                     'TSVs to an xmr annotation; --subset-size 300000 gives '
                                     'CC300K (docs/data.md).')
    parser.add_argument('--uc2-dir', type=Path, required=True,
                        help="folder of UC2's translated TSVs, one per language")
    parser.add_argument('--languages', nargs='+', action=GatherAction, default=list(UC2_LANGUAGES),
                        help='source language first')
    parser.add_argument('--tsv-pattern', default='train_imageId2Ann_{lang}.tsv',
                        help="file name of a language's TSV in --uc2-dir, {lang} its code")
    parser.add_argument('--images-dir', type=Path,
                        help='image folder; images without a file are left out')
    parser.add_argument('--image-name-format', default='{id:08d}.jpg',
                        help="file name of an image, {id} its TSV's image id (an int)")
    parser.add_argument('--subset-size', type=int_at_least(1),
                        help='seeded subset size (CC300K: 300000)')
    parser.add_argument('--seed', type=int, default=0, help='seed of --subset-size')
    parser.add_argument('--out', type=Path, required=True,
                        help='annotation file to write; a file standing there is replaced '
                        'only where it is a cc3m annotation a converter wrote (an earlier run), '
                        'never a TSV it reads or any other file')
    add_custom_imports(parser)
    args = parser.parse_args(argv)
    try:
        # Checked before the TSVs are read (minutes for CC3M): a TSV or another file at --out
        # was replaced by the annotation.
        languages = canonical_languages(args.languages, '--languages')
        refuse_written_over({'--out': args.out}, {
            f'--uc2-dir {lang} TSV': args.uc2_dir / args.tsv_pattern.format(lang=lang)
            for lang in languages})
        refuse_other_file(args.out, '--out', 'cc3m')
        ann = convert_cc3m(args.uc2_dir, args.languages, args.images_dir, args.subset_size,
                           args.seed, args.tsv_pattern, args.image_name_format)
        dump_converted({args.out: ann}, 'give --out another file')
    except (ConversionError, AnnotationError) as err:
        raise SystemExit(f'error: {err}') from err
    print(f'{args.out}: {len(ann.items)} images, {args.languages[0]} captions translated to '
          f'{", ".join(args.languages[1:])}')
