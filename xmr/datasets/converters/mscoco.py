"""MSCOCO (Karpathy splits, STAIR Captions ja, COCO-CN zh) to xmr annotations.

Raw files:

* Karpathy's ``dataset_coco.json``: ``images[*]`` with ``filepath`` (``train2014``/``val2014``),
  ``filename``, ``cocoid``, ``split`` (``train``/``restval``/``val``/``test``) and
  ``sentences[*].raw`` -- the English captions and the splits;
* STAIR Captions ``stair_captions_v1.2_{train,val}.json`` (COCO caption format:
  ``annotations[*]`` with ``image_id`` = COCO id and ``caption``) -- Japanese;
* COCO-CN ``coco-cn_{train,val,test}.txt`` (one image id per line, e.g.
  ``COCO_val2014_000000000042``) and ``imageid.human-written-caption.txt``
  (``<image id>#<k>\\t<caption>``) -- Chinese.

Outputs: ``coco_{train,train2014,val,test5k}.json`` (train = Karpathy train + restval, train2014 =
Karpathy train alone, i.e. COCO's train2014 images; val and test keep the first five English
captions of each image, in file order, the train splits all), the 1K protocol's
five folds ``coco_test1k_fold{0..4}.json`` (consecutive 1,000-image chunks of the 5K test, in
file order), and ``cococn_{train,val,test}.json`` with COCO-CN's own splits.
"""
from __future__ import annotations

import os
import warnings
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from xmr.datasets.annotation import Annotation, MediaRecord
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.json_captions import clean_caption, integer_id, read_json
from xmr.datasets.converters.karpathy import (
    KarpathyImage,
    KarpathyLayout,
    group_splits,
    karpathy_parser,
    read_karpathy,
    run_karpathy_command,
)
from xmr.datasets.converters.raw_files import check_media_exist, read_lines, require_file
from xmr.datasets.converters.translations import attach_translations
from xmr.datasets.converters.xtd10 import coco_image_path
from xmr.utils.cli import GatherAction

__all__ = ['COCO_KARPATHY', 'COCO_FOLDS', 'COCO_FOLD_SPLITS', 'coco_folds', 'read_stair',
           'read_coco_cn', 'convert_mscoco', 'main']

COCO_FOLDS = 5
COCO_FOLD_SIZE = 1000
#: The splits of the 1K protocol's folds (:func:`coco_folds`).
COCO_FOLD_SPLITS = tuple(f'test1k_fold{fold}' for fold in range(COCO_FOLDS))
COCO_CAPTIONS_PER_IMAGE = 5
# Output split -> Karpathy split labels it takes; the 5K test must split into the 1K folds.
# Karpathy's 'train' label is COCO's train2014 (82,783 images): a split of its own for methods
# trained on train2014 alone (CDDS), next to train + restval (113,287).
# A few images hold a sixth or seventh caption; the protocols rank five an image (VSE++'s and
# LAPS's data: 25,000 test captions), so val and test keep their first five and train keeps all.
COCO_KARPATHY = KarpathyLayout(
    id_key='cocoid', folder_key='filepath',
    splits={'train': ('train', 'restval'), 'train2014': ('train',), 'val': ('val',),
            'test5k': ('test',)},
    split_sizes={'test5k': COCO_FOLDS * COCO_FOLD_SIZE},
    captions_per_image={'val': COCO_CAPTIONS_PER_IMAGE, 'test5k': COCO_CAPTIONS_PER_IMAGE},
    sizes_required_by='the 1K/5K protocols')
COCO_CN_SPLITS = ('train', 'val', 'test')


def read_stair(paths: Sequence[str | os.PathLike]) -> dict[int, list[str]]:
    """Japanese captions per COCO id from STAIR Captions files (COCO caption format)."""
    captions: dict[int, list[str]] = defaultdict(list)
    for path in paths:
        data = read_json(path, 'STAIR Captions file')
        if not isinstance(data, dict) or not isinstance(data.get('annotations'), list):
            raise ConversionError(f'STAIR Captions file {path} has no "annotations" list')
        for index, entry in enumerate(data['annotations']):
            where = f'STAIR Captions file {path} annotation {index}'
            if not isinstance(entry, dict) or 'image_id' not in entry or 'caption' not in entry:
                raise ConversionError(f'{where} lacks image_id or caption')
            captions[integer_id(entry['image_id'], where, 'image_id')].append(
                clean_caption(entry['caption'], where))
    return dict(captions)


def read_coco_cn(coco_cn_dir: str | os.PathLike,
                 caption_file: str = 'imageid.human-written-caption.txt',
                 ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """COCO-CN's split lists and Chinese captions.

    Returns:
        ``(split -> image stems in file order, image stem -> captions in file order)``.
    """
    coco_cn_dir = Path(coco_cn_dir)
    splits: dict[str, list[str]] = {}
    for split in COCO_CN_SPLITS:
        path = coco_cn_dir / f'coco-cn_{split}.txt'
        splits[split] = [Path(line.strip()).stem if line.strip().endswith('.jpg')
                         else line.strip() for line in read_lines(path, what='COCO-CN split')]
    path = require_file(coco_cn_dir / caption_file, 'COCO-CN caption file')
    captions: dict[str, list[str]] = defaultdict(list)
    for number, line in enumerate(read_lines(path, what='COCO-CN caption file'), start=1):
        key, tab, text = line.partition('\t')
        stem, hash_sign, _ = key.partition('#')
        if not tab or not hash_sign or not text.strip():
            raise ConversionError(f'COCO-CN caption file {path} line {number} is not '
                                  f'"<image id>#<k>\\t<caption>": {line!r}')
        captions[stem].append(text)
    return splits, dict(captions)


def _records(images: Sequence[KarpathyImage], stair: Mapping[int, list[str]] | None,
             origin: str) -> list[MediaRecord]:
    if stair is not None:
        missing = [image.media_path for image in images if image.image_id not in stair]
        if missing:
            raise ConversionError(f'{origin}: STAIR Captions lack {len(missing)} of '
                                  f'{len(images)} images (first: {missing[0]}); pass every '
                                  'STAIR file (train and val)')
    return [MediaRecord(media_id=image.stem, media_path=image.media_path,
                        captions={'en': image.captions,
                                  **({'ja': stair[image.image_id]} if stair is not None else {})})
            for image in images]


def coco_folds(test5k: Annotation) -> dict[str, Annotation]:
    """The 1K protocol's folds of the 5K test: ``coco_test1k_fold{k}`` holds its images
    ``[1000 k, 1000 (k + 1))`` in file order, with their captions. A subset of the 5K test
    (``--skip-benchmark-size-check``) has none (a warning says so): its folds would not be the
    protocol's."""
    if len(test5k.items) != COCO_FOLDS * COCO_FOLD_SIZE:
        warnings.warn(f'the {test5k.split} split holds {len(test5k.items):,} images, not the '
                      f'{COCO_FOLDS * COCO_FOLD_SIZE:,} the 1K protocol folds: no '
                      'coco_test1k_fold* file is written', stacklevel=2)
        return {}
    return {f'coco_{split}': replace(
        test5k, split=split,
        items=test5k.items[fold * COCO_FOLD_SIZE:(fold + 1) * COCO_FOLD_SIZE])
        for fold, split in enumerate(COCO_FOLD_SPLITS)}


def convert_mscoco(karpathy_json: str | os.PathLike,
                   images_dir: str | os.PathLike | None = None,
                   stair_jsons: Sequence[str | os.PathLike] = (),
                   coco_cn_dir: str | os.PathLike | None = None,
                   train_translations: Mapping[str, str | os.PathLike] | None = None,
                   check_benchmark_size: bool = True) -> dict[str, Annotation]:
    """Build the MSCOCO annotations.

    Args:
        karpathy_json: ``dataset_coco.json``.
        images_dir: COCO image folder with ``train2014/`` and ``val2014/``; when given, every
            image must exist.
        stair_jsons: STAIR Captions files; when given, every Karpathy image gets ``ja``.
        coco_cn_dir: COCO-CN folder; when given, the ``cococn_*`` outputs are built.
        train_translations: target language -> machine translations of the English captions
            of ``coco_train.json`` (plain line format).
        check_benchmark_size: refuse a 5K test of another size; ``False`` for a deliberate
            subset (``--skip-benchmark-size-check``), which gets no 1K folds (:func:`coco_folds`).

    Returns:
        Output name (``coco_train``, ``coco_test1k_fold0``, ``cococn_test``, ...) -> annotation.
    """
    images = read_karpathy(karpathy_json, COCO_KARPATHY)
    stair = read_stair(stair_jsons) if stair_jsons else None
    by_split = group_splits(images, COCO_KARPATHY, karpathy_json, check_benchmark_size)
    languages = ['en', 'ja'] if stair is not None else ['en']
    outputs: dict[str, Annotation] = {}
    for name, split_images in by_split.items():
        outputs[f'coco_{name}'] = Annotation(
            dataset='mscoco', split=name, media_type='image', languages=languages,
            items=_records(split_images, stair, f'{name} split'), source_lang='en')
    outputs.update(coco_folds(outputs['coco_test5k']))
    if coco_cn_dir is not None:
        outputs.update(_coco_cn_outputs(images, stair, coco_cn_dir))
    if images_dir is not None:
        check_media_exist(images_dir, sorted({r.media_path for ann in outputs.values()
                                              for r in ann.items}))
    if train_translations:
        outputs['coco_train'] = attach_translations(outputs['coco_train'], train_translations)
    return outputs


def _coco_cn_outputs(images: Sequence[KarpathyImage], stair: Mapping[int, list[str]] | None,
                     coco_cn_dir: str | os.PathLike) -> dict[str, Annotation]:
    splits, chinese = read_coco_cn(coco_cn_dir)
    by_stem = {image.stem: image for image in images}
    outputs = {}
    for split, stems in splits.items():
        origin = f'COCO-CN split {Path(coco_cn_dir) / f"coco-cn_{split}.txt"}'
        split_images = []
        for stem in stems:
            # Stops on an id that is not a COCO 2014 file stem, naming the split file.
            coco_image_path(f'{stem}.jpg', origin)
            if stem not in by_stem:
                raise ConversionError(f'{origin}: image {stem} is not in the Karpathy file')
            if stem not in chinese:
                raise ConversionError(f'{origin}: image {stem} has no Chinese caption in the '
                                      'COCO-CN caption file')
            split_images.append(by_stem[stem])
        records = _records(split_images, stair, origin)
        for record in records:
            record.captions['zh'] = chinese[record.media_id]
        languages = ['en', 'ja', 'zh'] if stair is not None else ['en', 'zh']
        outputs[f'cococn_{split}'] = Annotation(dataset='coco-cn', split=split,
                                                media_type='image', languages=languages,
                                                items=records, source_lang='en')
    return outputs


def main(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/prepare_mscoco.py``."""
    parser = karpathy_parser('Convert MSCOCO (Karpathy, STAIR Captions, COCO-CN) to xmr '
                             'annotations (docs/data.md).',
                             images_help='COCO image folder with train2014/ and val2014/',
                             train_output='coco_train.json')
    parser.add_argument('--stair-json', type=Path, nargs='+', action=GatherAction, default=[],
                        help='STAIR Captions files (train and val) for Japanese')
    parser.add_argument('--coco-cn-dir', type=Path, help='COCO-CN folder for Chinese')
    run_karpathy_command(parser, argv, lambda args, images_dir, translations: convert_mscoco(
        args.karpathy_json, images_dir, args.stair_json, args.coco_cn_dir, translations,
        not args.skip_benchmark_size_check),
        lambda args: {**{f'coco_{split}': 'mscoco'
                         for split in (*COCO_KARPATHY.splits, *COCO_FOLD_SPLITS)},
                      **{f'cococn_{split}': 'coco-cn'
                         for split in (COCO_CN_SPLITS if args.coco_cn_dir else ())}})
