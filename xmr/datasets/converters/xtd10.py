"""XTD10 to xmr annotations.

Raw release layout (github.com/adobe-research/Cross-lingual-Test-Dataset-XTD10)::

    XTD10/test_1kcaptions_{lang}.txt   one caption per line, lang in en es it ko pl ru tr zh
                                       (es it ko pl ru tr zh: CRLF, no final newline)
    XTD10/test_image_names.txt         COCO 2014 file name per line (COCO_train2014_... or
                                       COCO_val2014_...)
    MIC/test_1kcaptions_{de,fr}.txt    German and French (MIC)
    STAIR/test_1kcaptions_jp.txt       Japanese (STAIR Captions)

``xtd_dir`` is the repository, its ``XTD10`` folder, or one folder holding every file: each
file is looked for in it, then in the release's folders inside it or beside it.

The release's ``jp`` becomes the ISO code ``ja``. Images resolve inside the COCO image folder
from the file name (``COCO_val2014_x.jpg`` -> ``val2014/COCO_val2014_x.jpg``). Outputs:
``xtd10_test.json`` (1,000 images x 11 languages) and, with ``few_shot``, PECTVLM's seeded
few-shot split ``xtd10_fewshot{n}_seed{seed}_{train,val,test}.json``: ``torch.randperm(1000)``
drawn from a generator seeded with ``seed``; train = ``perm[:n]``, val = ``perm[n:2n]``,
test = ``perm[2n:]``.
"""
from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from pathlib import Path

from xmr.datasets.annotation import Annotation, AnnotationError, text_pairs
from xmr.datasets.converters.cli import (
    add_media_options,
    add_out_dir,
    checked_media_dir,
    dump_into,
    refuse_other_files,
)
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.raw_files import (
    canonical_languages,
    check_media_exist,
    parallel_caption_records,
    read_lines,
)
from xmr.datasets.few_shot import FEW_SHOT_PARTS, few_shot_split_name, few_shot_splits
from xmr.datasets.languages import release_code
from xmr.utils.cli import GatherAction, add_custom_imports

__all__ = ['RELEASE_FOLDERS', 'XTD10_LANGUAGES', 'coco_image_path', 'convert_xtd10', 'main',
           'release_file']

XTD10_LANGUAGES = ('en', 'de', 'fr', 'es', 'it', 'ja', 'ko', 'pl', 'ru', 'tr', 'zh')
_COCO_NAME = re.compile(r'^COCO_(train2014|val2014|test2014)_\d+\.jpg$')


def coco_image_path(name: str, origin: str) -> str:
    """``COCO_val2014_000000000042.jpg`` -> ``val2014/COCO_val2014_000000000042.jpg``.

    Raises:
        ConversionError: if ``name`` is not a COCO 2014 file name (``origin`` names its source).
    """
    match = _COCO_NAME.match(name)
    if match is None:
        raise ConversionError(f'{origin}: {name!r} is not a COCO 2014 image file name '
                              '(COCO_<train2014|val2014>_<id>.jpg)')
    return f'{match.group(1)}/{name}'


#: The release's folders: XTD10's own languages and the image list, MIC's de and fr, STAIR's jp.
RELEASE_FOLDERS = ('XTD10', 'MIC', 'STAIR')


def release_file(xtd_dir: Path, name: str, what: str) -> Path:
    """``name`` in ``xtd_dir``, else in a folder of the release inside it (``xtd_dir`` is the
    repository) or beside it (``xtd_dir`` is its ``XTD10`` folder).

    Raises:
        ConversionError: naming the file, its role and ``xtd_dir``.
    """
    folders = [xtd_dir, *(xtd_dir / folder for folder in RELEASE_FOLDERS),
               *(xtd_dir.parent / folder for folder in RELEASE_FOLDERS)]
    for folder in folders:
        if (folder / name).is_file():
            return folder / name
    raise ConversionError(f"{what} {name} not found in {xtd_dir}, nor in the release's "
                          f"{'/, '.join(RELEASE_FOLDERS[:-1])}/ or {RELEASE_FOLDERS[-1]}/ "
                          'folders beside or inside it')


def convert_xtd10(xtd_dir: str | os.PathLike, images_dir: str | os.PathLike | None = None,
                  languages: Sequence[str] = XTD10_LANGUAGES,
                  image_names: str | os.PathLike | None = None) -> Annotation:
    """Build the XTD10 test annotation.

    Args:
        xtd_dir: the release's repository, its ``XTD10`` folder, or one folder with every
            ``test_1kcaptions_{lang}.txt`` (:func:`release_file`).
        images_dir: COCO image folder holding ``train2014/`` and ``val2014/``; when given,
            every image must exist.
        languages: languages to convert, in any accepted form (``ja`` or the release's ``jp``).
        image_names: the image list (default ``<xtd_dir>/test_image_names.txt``).

    Raises:
        ConversionError: naming the file at fault and what is wrong.
    """
    xtd_dir = Path(xtd_dir)
    languages = canonical_languages(languages, '--languages')
    list_path = Path(image_names) if image_names is not None else release_file(
        xtd_dir, 'test_image_names.txt', 'image list')
    names = read_lines(list_path, what='image list')
    paths = [coco_image_path(name, f'image list {list_path} line {number}')
             for number, name in enumerate(names, start=1)]
    files = {lang: release_file(xtd_dir, f"test_1kcaptions_{release_code('xtd10', lang)}.txt",
                                f'{lang} caption file')
             for lang in languages}
    records = parallel_caption_records(list_path, names, paths, files)
    if images_dir is not None:
        check_media_exist(images_dir, paths)
    source_lang = 'en' if 'en' in languages else None
    return Annotation(dataset='xtd10', split='test', media_type='image',
                      languages=list(languages), items=records, source_lang=source_lang)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/prepare_xtd10.py``."""
    parser = argparse.ArgumentParser(description='Convert the XTD10 release to xmr '
                                     'annotations (docs/data.md).')
    parser.add_argument('--xtd-dir', type=Path, required=True,
                        help="the release's repository or its XTD10 folder (MIC/ and STAIR/ "
                        'are found beside it), or one folder with every test_1kcaptions_{lang}.txt '
                        'and test_image_names.txt')
    parser.add_argument('--image-names', type=Path,
                        help='image list (default: test_image_names.txt of the release)')
    add_media_options(parser, 'images')
    add_out_dir(parser)
    parser.add_argument('--languages', nargs='+', action=GatherAction,
                        default=list(XTD10_LANGUAGES),
                        help=f"languages to keep, English first (default: XTD10's "
                        f"{' '.join(XTD10_LANGUAGES)})")
    parser.add_argument('--few-shot', type=int, metavar='N',
                        help="also write PECTVLM's seeded few-shot split with N train images")
    parser.add_argument('--seed', type=int, default=42, help='seed of the few-shot split')
    add_custom_imports(parser)
    args = parser.parse_args(argv)
    images_dir = checked_media_dir(parser, args, 'images')
    splits = ['test']
    if args.few_shot is not None:
        splits += [few_shot_split_name(args.few_shot, part, args.seed) for part in FEW_SHOT_PARTS]
    try:
        # Checked before the release is read: any other file named so was replaced.
        refuse_other_files(args.out_dir, {f'xtd10_{split}': 'xtd10' for split in splits})
        ann = convert_xtd10(args.xtd_dir, images_dir, args.languages, args.image_names)
        if args.text_only:
            ann = text_pairs(ann)
        outputs = {'xtd10_test': ann}
        if args.few_shot is not None:
            for part in few_shot_splits(ann, args.few_shot, args.seed).values():
                outputs[f'xtd10_{part.split}'] = part
        written = dump_into(args.out_dir, outputs, not args.skip_benchmark_size_check)
    except (ConversionError, AnnotationError) as err:
        raise SystemExit(f'error: {err}') from err
    for path, part in zip(written, outputs.values()):
        unit = 'text items' if args.text_only else 'images'
        print(f'{path}: {len(part.items)} {unit}, {len(args.languages)} languages')
