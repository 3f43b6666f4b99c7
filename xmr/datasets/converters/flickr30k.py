"""Flickr30K (Karpathy's splits, the five English captions of every image) to xmr annotations.

Raw file: Karpathy's ``dataset_flickr30k.json`` (``caption_datasets`` release): ``images[*]``
with ``filename`` (``1000092795.jpg``), ``imgid``, ``split`` (``train``/``val``/``test``) and
``sentences[*].raw`` -- 29,000 / 1,014 / 1,000 images with five captions each. Read by
:mod:`xmr.datasets.converters.karpathy`; the captions are cleaned like every JSON caption.

Outputs: ``flickr30k_{train,val,test}.json``. Media paths are the bare file names and media ids
the Flickr ids, as in the Multi30K converter's outputs, so one ``flickr30k-images/`` folder
serves both.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from xmr.datasets.annotation import Annotation, MediaRecord
from xmr.datasets.converters.karpathy import (
    KarpathyLayout,
    group_splits,
    karpathy_parser,
    read_karpathy,
    run_karpathy_command,
)
from xmr.datasets.converters.raw_files import check_media_exist
from xmr.datasets.converters.translations import attach_translations

__all__ = ['FLICKR30K_KARPATHY', 'convert_flickr30k', 'main']

# Every published Flickr30K retrieval result uses these counts (1K test images, 5K captions).
FLICKR30K_KARPATHY = KarpathyLayout(
    id_key='imgid', folder_key=None,
    splits={'train': ('train',), 'val': ('val',), 'test': ('test',)},
    split_sizes={'train': 29000, 'val': 1014, 'test': 1000},
    sizes_required_by="Karpathy's Flickr30K splits")


def convert_flickr30k(karpathy_json: str | os.PathLike,
                      images_dir: str | os.PathLike | None = None,
                      train_translations: Mapping[str, str | os.PathLike] | None = None,
                      check_benchmark_size: bool = True) -> dict[str, Annotation]:
    """Build the Flickr30K annotations from Karpathy's split file.

    Args:
        karpathy_json: ``dataset_flickr30k.json``.
        images_dir: the Flickr30K image folder (``flickr30k-images``); when given, every image
            must exist in it.
        train_translations: target language -> machine translations of the English captions of
            ``flickr30k_train.json`` (plain line format, five lines per image).
        check_benchmark_size: refuse splits of other sizes than Karpathy's; ``False`` for a
            deliberate subset (``--skip-benchmark-size-check``).

    Returns:
        Output name (``flickr30k_train``, ``flickr30k_val``, ``flickr30k_test``) -> annotation.

    Raises:
        ConversionError: naming the file and the image or split at fault, e.g. a split whose
            image count is not 29,000 / 1,014 / 1,000.
    """
    images = read_karpathy(karpathy_json, FLICKR30K_KARPATHY)
    outputs = {
        f'flickr30k_{name}': Annotation(
            dataset='flickr30k', split=name, media_type='image', languages=['en'],
            source_lang='en',
            items=[MediaRecord(media_id=image.stem, media_path=image.media_path,
                               captions={'en': image.captions}) for image in split_images])
        for name, split_images in group_splits(images, FLICKR30K_KARPATHY, karpathy_json,
                                                check_benchmark_size).items()}
    if images_dir is not None:
        check_media_exist(images_dir, [image.media_path for image in images])
    if train_translations:
        outputs['flickr30k_train'] = attach_translations(outputs['flickr30k_train'],
                                                         train_translations)
    return outputs


def main(argv: Sequence[str] | None = None) -> None:
    """Command line of ``tools/data/prepare_flickr30k.py``."""
    parser = karpathy_parser("Convert Flickr30K (Karpathy's dataset_flickr30k.json, five English "
                             'captions per image) to xmr annotations (docs/data.md).',
                             images_help='the Flickr30K image folder, flickr30k-images/',
                             train_output='flickr30k_train.json')
    run_karpathy_command(parser, argv, lambda args, images_dir, translations: convert_flickr30k(
        args.karpathy_json, images_dir, translations, not args.skip_benchmark_size_check),
        lambda args: {f'flickr30k_{split}': 'flickr30k' for split in FLICKR30K_KARPATHY.splits})
