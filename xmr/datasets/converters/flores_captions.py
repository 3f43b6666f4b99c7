"""XTD200 and Flickr30k-200: NLLB translations of a test set into the FLORES-200 languages.

Raw release layout (github.com/visheratin/nllb-clip, ``data/xtd200`` and ``data/flickr30k-200``,
the files CLIP_benchmark downloads)::

    <captions_dir>/<flores code>.txt   one caption per line (``swh_Latn.txt``, ``eng_Latn.txt``);
                                       line i describes the image on line i of the image list
    <captions_dir>/test_image_names.txt   XTD200: 1,000 COCO 2014 file names (XTD10's images)
    <captions_dir>/filenames.txt          Flickr30k-200: 1,000 Flickr file names (the 1K test)

Caption files are read like every line-based release (:func:`read_lines`); the FLORES codes become
canonical codes (``swh_Latn`` -> ``sw``, ``docs/data.md``). Outputs: ``xtd200_test.json`` and
``flickr30k_200_test.json``, one caption per image and language.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from xmr.datasets.annotation import Annotation
from xmr.datasets.converters.cli import (
    add_media_options,
    add_out_dir,
    checked_media_dir,
    write_converted,
)
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.raw_files import (
    canonical_languages,
    check_media_exist,
    parallel_caption_records,
    read_lines,
)
from xmr.datasets.converters.xtd10 import coco_image_path
from xmr.datasets.languages import FLORES200_TO_CANONICAL, LanguageCodeError, flores_code
from xmr.utils.cli import GatherAction, add_custom_imports

__all__ = ['IMAGE_LISTS', 'convert_flores_captions', 'main_xtd200', 'main_flickr30k_200']

# dataset -> the release's image list.
IMAGE_LISTS = {'xtd200': 'test_image_names.txt', 'flickr30k_200': 'filenames.txt'}


def convert_flores_captions(dataset: str, captions_dir: str | os.PathLike,
                            languages: Sequence[str],
                            images_dir: str | os.PathLike | None = None,
                            media_path: Callable[[str, str], str] | None = None) -> Annotation:
    """Build the test annotation of XTD200 or Flickr30k-200.

    Args:
        dataset: ``'xtd200'`` or ``'flickr30k_200'``.
        captions_dir: folder with the ``<flores code>.txt`` files and the image list.
        languages: languages in any accepted form (``sw``, ``swh_Latn``); ``['all']`` takes
            every FLORES-200 caption file of ``captions_dir``.
        images_dir: the image folder; when given, every image must exist.
        media_path: ``(file name, origin) -> path`` relative to the image folder; default the
            bare file name.

    Raises:
        ConversionError: naming the file at fault and what is wrong.
    """
    if dataset not in IMAGE_LISTS:
        raise ConversionError(f'unknown dataset {dataset!r}; choose one of {list(IMAGE_LISTS)}')
    captions_dir = Path(captions_dir)
    if 'all' in languages:
        languages = _every_caption_file(captions_dir, list(languages))
    languages = canonical_languages(languages, '--languages')
    list_path = captions_dir / IMAGE_LISTS[dataset]
    names = read_lines(list_path, what='image list')
    to_path = media_path or (lambda name, origin: name)
    paths = [to_path(name, f'image list {list_path} line {number}')
             for number, name in enumerate(names, start=1)]
    files = {lang: captions_dir / f'{_flores(lang)}.txt' for lang in languages}
    records = parallel_caption_records(list_path, names, paths, files)
    if images_dir is not None:
        check_media_exist(images_dir, paths)
    return Annotation(dataset=dataset, split='test', media_type='image', languages=languages,
                      items=records, source_lang='en' if 'en' in languages else None)


def _every_caption_file(captions_dir: Path, languages: list[str]) -> list[str]:
    """The FLORES-200 codes of the caption files in ``captions_dir`` (``languages`` is
    ``['all']``), sorted.

    Raises:
        ConversionError: ``all`` beside other codes, or a folder without caption files.
    """
    if languages != ['all']:
        raise ConversionError(f"--languages {languages}: 'all' takes every caption file of the "
                              'folder; give it alone, or list the codes')
    found = sorted(path.stem for path in captions_dir.glob('*.txt')
                   if path.stem in FLORES200_TO_CANONICAL)
    if not found:
        raise ConversionError(f'--languages all: no FLORES-200 caption file (<flores code>.txt, '
                              f'such as swh_Latn.txt) in {captions_dir}; give the folder of the '
                              "release's caption files (nllb-clip's data/xtd200 or "
                              'data/flickr30k-200)')
    return found


def _flores(lang: str) -> str:
    try:
        return flores_code(lang)
    except LanguageCodeError as error:
        raise ConversionError(str(error)) from error


def _parser(dataset: str, images_help: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=f'Convert the {dataset} release (NLLB '
                                     'translations, FLORES-200 file names) to an xmr annotation '
                                     '(docs/data.md).')
    parser.add_argument('--captions-dir', type=Path, required=True,
                        help=f'folder of <flores code>.txt and {IMAGE_LISTS[dataset]}')
    add_media_options(parser, 'images', images_help)
    add_out_dir(parser)
    parser.add_argument('--languages', nargs='+', action=GatherAction, required=True,
                        help="codes in any accepted form (sw, swh_Latn), or 'all'")
    add_custom_imports(parser)
    return parser


def _run(dataset: str, parser: argparse.ArgumentParser, argv: Sequence[str] | None,
         media_path: Callable[[argparse.Namespace], Callable[[str, str], str] | None]) -> None:
    args = parser.parse_args(argv)
    images_dir = checked_media_dir(parser, args, 'images')
    write_converted(lambda: {f'{dataset}_test': convert_flores_captions(
        dataset, args.captions_dir, args.languages, images_dir, media_path(args))},
        args.out_dir, 'images', lambda: {f'{dataset}_test': dataset}, text_only=args.text_only,
        check_benchmark_size=not args.skip_benchmark_size_check)


def main_xtd200(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/prepare_xtd200.py``."""
    parser = _parser('xtd200', 'COCO image folder with train2014/ and val2014/, or with '
                     '--flat-images the folder of the release tarball')
    parser.add_argument('--flat-images', action='store_true',
                        help='images sit directly in --images-dir (the nllb-data tarball)')
    _run('xtd200', parser, argv, lambda args: None if args.flat_images else coco_image_path)


def main_flickr30k_200(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/prepare_flickr30k_200.py``."""
    parser = _parser('flickr30k_200', 'the Flickr30K image folder, flickr30k-images/')
    _run('flickr30k_200', parser, argv, lambda args: None)
