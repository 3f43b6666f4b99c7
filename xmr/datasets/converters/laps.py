"""LAPS's (and VSE++'s) prepared Flickr30K and MSCOCO caption files to xmr annotations.

Raw files, one folder per dataset (LAPS's ``data/f30k/``, ``data/coco/``):

* ``{split}_caps.txt``: one English caption per line;
* ``{split}_ids.txt``: the image id of each caption, line ``i`` of both files describing one
  caption (LAPS's files: an image's five captions on five consecutive lines, its id repeated);
  a file with one id per image and five captions each is read too, as LAPS's loader does
  (``im_div = 5`` when the counts differ);
* ``id_mapping.json``: image id -> image file (``{"25": "1007129816.jpg", ...}``; COCO's
  ids are COCO ids and its files ``COCO_<train2014|val2014>_<id>.jpg``, with or without their
  folder).

Flickr30K's splits are ``train``, ``dev`` and ``test`` (29,000 / 1,014 / 1,000 images); COCO's
``train``, ``dev`` and ``testall`` (113,287 / 1,000 / 5,000: ``dev`` is the first 1,000 images of
Karpathy's 5K val, ``testall`` the 5K test, whose consecutive 1,000 images are the 1K protocol's
folds, as LAPS's ``fold5`` evaluation cuts it). Outputs carry the names and media paths of the
Karpathy converters' (``flickr30k_{train,val,test}.json``; ``coco_{train,val,test5k}.json`` and
``coco_test1k_fold{0..4}.json``), so the same configs read either; LAPS's ``coco_val.json`` holds
1,000 images where the Karpathy converter's holds 5,000. Captions are kept byte for byte, as every
line-based release's: LAPS's are tokenized (``an orange hat .``), Karpathy's ``raw`` are not.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from xmr.datasets.annotation import Annotation, MediaRecord
from xmr.datasets.converters.cli import (
    add_media_options,
    add_out_dir,
    checked_media_dir,
    write_converted,
)
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.json_captions import read_json
from xmr.datasets.converters.mscoco import COCO_FOLD_SIZE, COCO_FOLD_SPLITS, COCO_FOLDS, coco_folds
from xmr.datasets.converters.raw_files import check_media_exist, parse_lang_paths, read_lines
from xmr.datasets.converters.translations import attach_translations
from xmr.datasets.converters.xtd10 import coco_image_path
from xmr.utils.cli import GatherAction, add_custom_imports

__all__ = ['LAPS_DATASETS', 'LapsDataset', 'LapsImage', 'convert_laps', 'laps_outputs', 'main',
           'read_laps_split']

# The 1K/5K protocols rank five captions an image (VSE++'s and LAPS's test files hold 25,000).
EVAL_CAPTIONS_PER_IMAGE = 5


@dataclass(frozen=True)
class LapsDataset:
    """One dataset's folder of LAPS files and the xmr outputs it becomes.

    Attributes:
        dataset: the annotations' ``dataset`` (``flickr30k``, ``mscoco``).
        prefix: the output files' prefix (``flickr30k``, ``coco``).
        splits: LAPS split -> output split (``{'dev': 'val', ...}``), in writing order.
        test_split: the LAPS split every conversion needs.
        sizes: LAPS split -> the image count its protocol needs.
        media_path: image file given by ``id_mapping.json`` (and the place it is named in)
            -> ``media_path``.
    """

    dataset: str
    prefix: str
    splits: Mapping[str, str]
    test_split: str
    sizes: Mapping[str, int]
    media_path: Callable[[str, str], str]


def _flickr_path(name: str, origin: str) -> str:
    return name


def _coco_path(name: str, origin: str) -> str:
    # The folder follows from the file name, whether or not the mapping gives it.
    return coco_image_path(Path(name).name, origin)


LAPS_DATASETS = {
    'f30k': LapsDataset(dataset='flickr30k', prefix='flickr30k',
                        splits={'train': 'train', 'dev': 'val', 'test': 'test'},
                        test_split='test', sizes={'test': 1000}, media_path=_flickr_path),
    'coco': LapsDataset(dataset='mscoco', prefix='coco',
                        splits={'train': 'train', 'dev': 'val', 'testall': 'test5k'},
                        test_split='testall', sizes={'testall': COCO_FOLDS * COCO_FOLD_SIZE},
                        media_path=_coco_path),
}


@dataclass
class LapsImage:
    """One image of a LAPS split.

    Attributes:
        image_id: its id in ``{split}_ids.txt``.
        lines: the id file's lines that name it (first, last; 1-based).
        captions: its captions, in file order.
    """

    image_id: int
    lines: tuple[int, int]
    captions: list[str]


def read_laps_split(folder: str | os.PathLike, split: str,
                    captions_per_image: int | None = None) -> list[LapsImage]:
    """Read ``{split}_ids.txt`` and ``{split}_caps.txt`` of a LAPS folder, aligned.

    Args:
        folder: the dataset's LAPS folder.
        split: ``train``, ``dev``, ``test`` or ``testall``.
        captions_per_image: the captions each image must have (an evaluation split's
            protocol), or ``None`` for any number.

    Returns:
        The images in file order, each with its captions.

    Raises:
        ConversionError: naming the file and line at fault: a line that is not an integer id,
            a caption or id without its partner line, an image whose captions are not on
            consecutive lines, or one with another number of captions than required.
    """
    ids_path, caps_path = _split_paths(Path(folder), split)
    ids = _read_ids(ids_path)
    captions = read_lines(caps_path, 'LAPS caption file')
    caption_ids = _caption_ids(ids, len(captions), ids_path, caps_path)
    images: list[LapsImage] = []
    first_line: dict[int, int] = {}
    for (line, image_id), caption in zip(caption_ids, captions):
        if images and images[-1].image_id == image_id:
            images[-1].lines = (images[-1].lines[0], line)
            images[-1].captions.append(caption)
            continue
        if image_id in first_line:
            raise ConversionError(f'LAPS id file {ids_path} line {line} names image {image_id} '
                                  f'again, apart from its captions on line {first_line[image_id]}:'
                                  " an image's captions must be on consecutive lines")
        first_line[image_id] = line
        images.append(LapsImage(image_id, (line, line), [caption]))
    if captions_per_image is not None:
        _check_caption_counts(images, captions_per_image, ids_path)
    return images


def _read_ids(path: Path) -> list[int]:
    """The integer ids of an id file, one a line."""
    ids = []
    for number, line in enumerate(read_lines(path, 'LAPS id file'), start=1):
        try:
            ids.append(int(line))
        except ValueError as err:
            raise ConversionError(f'LAPS id file {path} line {number}: {line!r} is not an image '
                                  'id (an integer)') from err
    return ids


def _caption_ids(ids: Sequence[int], num_captions: int, ids_path: Path,
                 caps_path: Path) -> list[tuple[int, int]]:
    """``(id file line, image id)`` of each caption: one id a caption, or one an image with
    five captions each, as LAPS's loader reads them."""
    if len(ids) == num_captions:
        return list(enumerate(ids, start=1))
    if num_captions == EVAL_CAPTIONS_PER_IMAGE * len(ids):
        return [(line, image_id) for line, image_id in enumerate(ids, start=1)
                for _ in range(EVAL_CAPTIONS_PER_IMAGE)]
    counts = (f'{caps_path} has {num_captions} lines and {ids_path} {len(ids)}: one id per '
              f'caption ({num_captions}), or one per image and {EVAL_CAPTIONS_PER_IMAGE} '
              'captions each, is the LAPS layout')
    if len(ids) > num_captions:
        raise ConversionError(f'LAPS id file {ids_path} line {num_captions + 1} (image '
                              f'{ids[num_captions]}) has no caption: {counts}')
    raise ConversionError(f'LAPS caption file {caps_path} line {len(ids) + 1} has no image id: '
                          f'{counts}')


def _check_caption_counts(images: Sequence[LapsImage], expected: int, ids_path: Path) -> None:
    for image in images:
        if len(image.captions) != expected:
            first, last = image.lines
            raise ConversionError(f'LAPS id file {ids_path} lines {first}-{last} give image '
                                  f'{image.image_id} {len(image.captions)} captions; the '
                                  f'evaluation protocols rank {expected} an image')


def _split_paths(folder: Path, split: str) -> tuple[Path, Path]:
    return folder / f'{split}_ids.txt', folder / f'{split}_caps.txt'


def _present_splits(folder: Path, layout: LapsDataset) -> list[str]:
    """The layout's splits whose two files are in ``folder`` (the test split must be)."""
    present = []
    for split in layout.splits:
        ids_path, caps_path = _split_paths(folder, split)
        if ids_path.is_file() != caps_path.is_file():
            have, lack = (ids_path, caps_path) if ids_path.is_file() else (caps_path, ids_path)
            raise ConversionError(f'LAPS folder {folder} has {have.name} but not {lack.name}')
        if ids_path.is_file():
            present.append(split)
    if layout.test_split not in present:
        raise ConversionError(f'LAPS folder {folder} has no {layout.test_split}_ids.txt and '
                              f'{layout.test_split}_caps.txt: check --laps-dir and --dataset')
    return present


def _media_paths(images: Sequence[LapsImage], mapping: Mapping[str, object], mapping_path: Path,
                 ids_path: Path, layout: LapsDataset) -> list[str]:
    paths = []
    for image in images:
        name = mapping.get(str(image.image_id))
        where = f'LAPS id file {ids_path} line {image.lines[0]}: image {image.image_id}'
        if not isinstance(name, str) or not name:
            raise ConversionError(f'{where} has no file in {mapping_path} (found {name!r})')
        paths.append(layout.media_path(name, f'{where} in {mapping_path}'))
    return paths


def _check_size(images: Sequence[LapsImage], split: str, layout: LapsDataset,
                ids_path: Path) -> None:
    expected = layout.sizes.get(split)
    if expected is not None and len(images) != expected:
        raise ConversionError(f'LAPS id file {ids_path} names {len(images)} images; the '
                              f'{layout.prefix} {split} protocol needs {expected}')


def convert_laps(laps_dir: str | os.PathLike, dataset: str,
                 images_dir: str | os.PathLike | None = None,
                 id_mapping: str | os.PathLike | None = None,
                 train_translations: Mapping[str, str | os.PathLike] | None = None,
                 check_benchmark_size: bool = True) -> dict[str, Annotation]:
    """Build the annotations of a LAPS dataset folder.

    Args:
        laps_dir: the folder with ``{split}_{ids,caps}.txt`` (LAPS's ``data/f30k``).
        dataset: ``f30k`` or ``coco``.
        images_dir: the image folder (``flickr30k-images``; COCO's, with ``train2014/`` and
            ``val2014/``); when given, every image must exist in it.
        id_mapping: image id -> file (default ``<laps_dir>/id_mapping.json``).
        train_translations: target language -> machine translations of the train split's
            captions (plain line format, one line per caption).
        check_benchmark_size: refuse a test split of another size than its protocol's;
            ``False`` for a deliberate subset (``--skip-benchmark-size-check``; COCO's then
            gets no 1K folds).

    Returns:
        Output name (``flickr30k_test``, ``coco_test1k_fold0``, ...) -> annotation, for each
        split whose two files are present.

    Raises:
        ConversionError: naming the file (and line) at fault.
    """
    if dataset not in LAPS_DATASETS:
        raise ConversionError(f'unknown LAPS dataset {dataset!r}; expected one of '
                              f'{sorted(LAPS_DATASETS)}')
    layout, folder = LAPS_DATASETS[dataset], Path(laps_dir)
    mapping_path = Path(id_mapping) if id_mapping is not None else folder / 'id_mapping.json'
    mapping = read_json(mapping_path, 'LAPS id mapping')
    if not isinstance(mapping, dict):
        raise ConversionError(f'LAPS id mapping {mapping_path} is not an object of image id -> '
                              'file')
    outputs: dict[str, Annotation] = {}
    for split in _present_splits(folder, layout):
        ids_path = _split_paths(folder, split)[0]
        per_image = None if split == 'train' else EVAL_CAPTIONS_PER_IMAGE
        images = read_laps_split(folder, split, per_image)
        if check_benchmark_size:
            _check_size(images, split, layout, ids_path)
        paths = _media_paths(images, mapping, mapping_path, ids_path, layout)
        name = layout.splits[split]
        outputs[f'{layout.prefix}_{name}'] = Annotation(
            dataset=layout.dataset, split=name, media_type='image', languages=['en'],
            source_lang='en',
            items=[MediaRecord(media_id=Path(path).stem, media_path=path,
                               captions={'en': image.captions})
                   for image, path in zip(images, paths)])
    if 'testall' in layout.splits:
        outputs.update(coco_folds(outputs[f'{layout.prefix}_test5k']))
    if images_dir is not None:
        check_media_exist(images_dir, sorted({record.media_path for ann in outputs.values()
                                              for record in ann.items}))
    if train_translations:
        train = f'{layout.prefix}_train'
        if train not in outputs:
            raise ConversionError(f'--translations need the train split: LAPS folder {folder} '
                                  'has no train_ids.txt and train_caps.txt')
        outputs[train] = attach_translations(outputs[train], train_translations)
    return outputs


def laps_outputs(layout: LapsDataset) -> dict[str, str]:
    """Output name -> dataset of every file :func:`convert_laps` may write for ``layout`` (a
    split is written where its files are present)."""
    folds = COCO_FOLD_SPLITS if 'testall' in layout.splits else ()
    return {f'{layout.prefix}_{split}': layout.dataset
            for split in (*layout.splits.values(), *folds)}


def main(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/prepare_laps.py``."""
    parser = argparse.ArgumentParser(
        description="Convert LAPS's (VSE++'s) prepared Flickr30K or MSCOCO caption files, "
        '{split}_ids.txt, {split}_caps.txt and id_mapping.json, to xmr annotations '
        '(docs/data.md).')
    parser.add_argument('--laps-dir', type=Path, required=True,
                        help="the dataset's LAPS folder (LAPS's data/f30k or data/coco)")
    parser.add_argument('--dataset', choices=sorted(LAPS_DATASETS), required=True,
                        help='which dataset --laps-dir holds')
    parser.add_argument('--id-mapping', type=Path,
                        help='image id -> file (default: <laps-dir>/id_mapping.json)')
    add_media_options(parser, 'images')
    add_out_dir(parser)
    parser.add_argument('--translations', nargs='+', action=GatherAction, metavar='LANG=PATH',
                        help='machine translations of the train split, one line per caption')
    add_custom_imports(parser)
    args = parser.parse_args(argv)
    images_dir = checked_media_dir(parser, args, 'images')
    write_converted(lambda: convert_laps(args.laps_dir, args.dataset, images_dir,
                                         args.id_mapping,
                                         parse_lang_paths(args.translations, '--translations'),
                                         not args.skip_benchmark_size_check),
                    args.out_dir, 'images', lambda: laps_outputs(LAPS_DATASETS[args.dataset]),
                    text_only=args.text_only,
                    check_benchmark_size=not args.skip_benchmark_size_check)
