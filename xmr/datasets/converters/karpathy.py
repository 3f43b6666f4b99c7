"""Karpathy's split files (``dataset_coco.json``, ``dataset_flickr30k.json``) and their commands.

Karpathy's ``caption_datasets`` release describes every benchmark image by one entry of
``images``: ``filename``, a numeric id, ``split`` and ``sentences[*].raw`` (the captions);
``dataset_coco.json`` adds the sub-folder ``filepath`` (``train2014``/``val2014``) and names its id
``cocoid``, ``dataset_flickr30k.json`` keeps all images in one folder and uses ``imgid``.
A :class:`KarpathyLayout` states those differences and the output splits a dataset builds from
the file's split labels, so one reader serves both.

The release's captions sit inside JSON fields, so they are cleaned like every JSON caption
(:func:`~xmr.datasets.converters.json_captions.clean_caption`: line breaks folded, ends stripped).
"""
from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from xmr.datasets.annotation import Annotation
from xmr.datasets.converters.cli import (
    add_media_options,
    add_out_dir,
    checked_media_dir,
    write_converted,
)
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.json_captions import clean_caption, integer_id, read_json
from xmr.datasets.converters.raw_files import parse_lang_paths
from xmr.utils.cli import GatherAction, add_custom_imports

__all__ = ['KarpathyLayout', 'KarpathyImage', 'read_karpathy', 'group_splits',
           'karpathy_parser', 'run_karpathy_command']


@dataclass(frozen=True)
class KarpathyLayout:
    """What one dataset's Karpathy file holds and how its splits become outputs.

    Attributes:
        id_key: key of the numeric image id (``cocoid``, ``imgid``).
        folder_key: key of the image's sub-folder (``filepath``), or ``None`` when every image
            sits in one folder and ``media_path`` is the bare file name.
        splits: output split -> the file's ``split`` labels it takes, e.g. COCO's
            ``{'train': ('train', 'restval'), ...}``; every label of the file must appear here.
        split_sizes: output split -> the image count it must have (splits not named are free).
        captions_per_image: output split -> the captions an image keeps, its first ones in file
            order (splits not named keep all): an evaluation split whose protocol ranks a fixed
            number per image, as COCO's five of VSE++'s data.
        sizes_required_by: who needs those counts, ending the size error's sentence and the
            dropped captions' warning (``the 1K/5K protocols``).
    """

    id_key: str
    folder_key: str | None
    splits: Mapping[str, tuple[str, ...]]
    split_sizes: Mapping[str, int] = field(default_factory=dict)
    captions_per_image: Mapping[str, int] = field(default_factory=dict)
    sizes_required_by: str = ''


@dataclass
class KarpathyImage:
    """One image entry of a Karpathy file.

    Attributes:
        stem: file name without extension, the image's ``media_id``.
        media_path: ``<folder>/<filename>`` or ``<filename>`` (see ``KarpathyLayout.folder_key``).
        image_id: the entry's numeric id (``cocoid`` or ``imgid``).
        split: the file's split label (``train``, ``restval``, ``val``, ``test``).
        captions: the cleaned English captions in file order.
    """

    stem: str
    media_path: str
    image_id: int
    split: str
    captions: list[str]


def read_karpathy(path: str | os.PathLike, layout: KarpathyLayout) -> list[KarpathyImage]:
    """Parse and check a Karpathy split file.

    Args:
        path: ``dataset_coco.json`` or ``dataset_flickr30k.json``.
        layout: the keys and split labels of that dataset.

    Returns:
        The images in file order.

    Raises:
        ConversionError: naming the file, the image index and the bad field.
    """
    data = read_json(path, 'Karpathy split file')
    if not isinstance(data, dict) or not isinstance(data.get('images'), list):
        raise ConversionError(f'Karpathy split file {path} has no "images" list')
    known = {label for labels in layout.splits.values() for label in labels}
    required = [key for key in (layout.folder_key, 'filename', layout.id_key, 'split', 'sentences')
                if key is not None]
    first_index: dict[str, int] = {}
    images = []
    for index, entry in enumerate(data['images']):
        where = f'Karpathy split file {path} image {index}'
        if not isinstance(entry, dict):
            raise ConversionError(f'{where} is not an object')
        missing = [key for key in required if key not in entry]
        if missing:
            raise ConversionError(f'{where} lacks {missing}')
        for key in (layout.folder_key, 'filename'):
            if key is not None and (not isinstance(entry[key], str) or not entry[key]
                                    or '/' in entry[key]):
                raise ConversionError(f'{where} has {key} {entry[key]!r}, not a file or folder '
                                      'name')
        if entry['split'] not in known:
            raise ConversionError(f'{where} has split {entry["split"]!r}, expected one of '
                                  f'{sorted(known)}')
        image_id = integer_id(entry[layout.id_key], where, layout.id_key)
        media_path = (entry['filename'] if layout.folder_key is None
                      else f'{entry[layout.folder_key]}/{entry["filename"]}')
        if media_path in first_index:
            raise ConversionError(f'{where} lists {media_path} again (first as image '
                                  f'{first_index[media_path]})')
        first_index[media_path] = index
        sentences = entry['sentences']
        if not isinstance(sentences, list) or not sentences:
            raise ConversionError(f'{where} has no sentences')
        captions = [clean_caption(s.get('raw') if isinstance(s, dict) else s,
                                  f'{where} ({entry["filename"]}) sentence {k} "raw"')
                    for k, s in enumerate(sentences)]
        images.append(KarpathyImage(stem=Path(entry['filename']).stem, media_path=media_path,
                                    image_id=image_id, split=entry['split'], captions=captions))
    if not images:
        raise ConversionError(f'Karpathy split file {path} lists no images')
    return images


def group_splits(images: Sequence[KarpathyImage], layout: KarpathyLayout,
                 path: str | os.PathLike, check_benchmark_size: bool = True
                 ) -> dict[str, list[KarpathyImage]]:
    """The images of each output split, in file order, checked against ``layout.split_sizes``
    and cut to ``layout.captions_per_image`` (a warning counts the captions dropped).

    Args:
        images: :func:`read_karpathy`'s result.
        layout: the one it was read with.
        path: the file, named in errors and warnings.
        check_benchmark_size: check ``layout.split_sizes``; ``False`` for a deliberate subset
            (``--skip-benchmark-size-check``).

    Raises:
        ConversionError: when an output split is empty or its size differs from
            ``layout.split_sizes`` (naming the split and both counts).
    """
    by_split = {name: [image for image in images if image.split in labels]
                for name, labels in layout.splits.items()}
    for name, split_images in by_split.items():
        if not split_images:
            raise ConversionError(f'Karpathy split file {path} has no '
                                  f'{"/".join(layout.splits[name])} images')
    for name, expected in layout.split_sizes.items() if check_benchmark_size else ():
        if len(by_split[name]) != expected:
            raise ConversionError(f'Karpathy split file {path} has {len(by_split[name])} '
                                  f'{"/".join(layout.splits[name])} images; '
                                  f'{layout.sizes_required_by} need {expected}')
    for name, kept in layout.captions_per_image.items():
        by_split[name] = _first_captions(by_split[name], kept, layout, name, path)
    return by_split


def _first_captions(images: Sequence[KarpathyImage], kept: int, layout: KarpathyLayout,
                    name: str, path: str | os.PathLike) -> list[KarpathyImage]:
    """``images`` with their first ``kept`` captions, warning how many were dropped."""
    longer = [image for image in images if len(image.captions) > kept]
    if longer:
        dropped = sum(len(image.captions) - kept for image in longer)
        warnings.warn(f'Karpathy split file {path}: {dropped} captions of {len(longer)} '
                      f'{"/".join(layout.splits[name])} images dropped; '
                      f'{layout.sizes_required_by} rank the first {kept} of each image, in file '
                      f'order (first: {longer[0].media_path}, {len(longer[0].captions)} captions)',
                      stacklevel=3)
    return [replace(image, captions=image.captions[:kept]) for image in images]


def karpathy_parser(description: str, images_help: str, train_output: str,
                    ) -> argparse.ArgumentParser:
    """A command line with the flags every Karpathy-file converter takes.

    Args:
        description: the tool's description.
        images_help: what ``--images-dir`` must hold.
        train_output: the file ``--translations`` are joined to (``coco_train.json``).
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('--karpathy-json', type=Path, required=True,
                        help="Karpathy's split file (dataset_<name>.json)")
    add_media_options(parser, 'images', images_help)
    add_out_dir(parser)
    parser.add_argument('--translations', nargs='+', action=GatherAction, metavar='LANG=PATH',
                        help=f'machine translations of {train_output}, one line per caption')
    add_custom_imports(parser)
    return parser


def run_karpathy_command(
        parser: argparse.ArgumentParser, argv: Sequence[str] | None,
        convert: Callable[[argparse.Namespace, Path | None, dict[str, Path]],
                          Mapping[str, Annotation]],
        outputs: Callable[[argparse.Namespace], Mapping[str, str]]) -> None:
    """Parse the command line, convert, write ``<out-dir>/<output name>.json`` and list them.

    Args:
        parser: from :func:`karpathy_parser`, with the dataset's own flags added.
        argv: the arguments (``None``: ``sys.argv``).
        convert: ``(args, images_dir or None to skip the media check (--skip-media-check,
            --text-only), translations) ->``
            output name -> annotation.
        outputs: ``args ->`` output name -> dataset of every file the run may write
            (:func:`~xmr.datasets.converters.cli.write_converted`).

    Raises:
        SystemExit: on a bad input, with the converter's message; nothing is written then.
    """
    args = parser.parse_args(argv)
    images_dir = checked_media_dir(parser, args, 'images')
    write_converted(lambda: convert(args, images_dir,
                                    parse_lang_paths(args.translations, '--translations')),
                    args.out_dir, 'images', lambda: outputs(args), text_only=args.text_only,
                    check_benchmark_size=not args.skip_benchmark_size_check)
