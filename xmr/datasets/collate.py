"""Batch assembly for retrieval data."""
from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.registry import FUNCTIONS


@FUNCTIONS.register_module()
def retrieval_collate(items: Sequence[dict[str, Any] | SkippedMedia | None]) -> dict[str, Any]:
    """Collate dataset items into one batch dict.

    Tensors under ``media`` are stacked (``[B, 3, H, W]`` images or ``[B, T, 3, H, W]`` videos),
    and media that are all ``None`` (text-only datasets) collate to ``None``; cached features
    (``source_features``, ``media_features``: ``[E]`` each) are stacked to ``[B, E]``, so that a
    batch reaches the GPU in one copy rather than one per sample; every other key becomes a
    list of length ``B``; every kept item must carry the same keys. Items that a dataset
    skipped (``None``, or a ``SkippedMedia`` marker for an unreadable file under
    ``on_corrupt='skip'``) are dropped; the markers' file paths are listed under
    ``skipped_media`` (present only when something was skipped) for ``CorruptMediaHook`` to
    count. Items with a ``media_id`` also get
    ``media_keys`` (int64 ``[B]``, :func:`media_keys`), with which a loss tells the other
    captions of an item's media in the global batch.

    Args:
        items: dataset items (see ``docs/data.md`` for their keys).

    Returns:
        The batch, with ``batch_size`` holding the number of kept items.

    Raises:
        ValueError: kept items with other keys than the first's, naming both.
    """
    kept = [item for item in items if item is not None and not isinstance(item, SkippedMedia)]
    skipped = [item.media_path for item in items if isinstance(item, SkippedMedia)]
    batch: dict[str, Any] = {'batch_size': len(kept)}
    if skipped:
        batch['skipped_media'] = skipped
    if not kept:
        return batch
    _check_same_keys(kept)
    for key in kept[0]:
        values = [item[key] for item in kept]
        stacked = key == 'media' or key.endswith('_features')
        if stacked and all(isinstance(v, torch.Tensor) for v in values):
            _check_same_shape(kept, key)
            batch[key] = torch.stack(values)
        elif key == 'media' and all(v is None for v in values):
            batch[key] = None
        else:
            batch[key] = values
    if 'media_id' in batch:
        batch['media_keys'] = media_keys(batch['media_id'])
    return batch


def _check_same_keys(items: Sequence[dict[str, Any]]) -> None:
    """Refuse items whose keys differ from the first's: the batch takes the first item's keys,
    so another key would vanish from it unsaid, or a missing one stop it unnamed.

    Raises:
        ValueError: naming the two items (by their ``index``) and the keys that differ.
    """
    first = items[0]
    for item in items[1:]:
        if item.keys() == first.keys():
            continue
        extra, missing = sorted(item.keys() - first.keys()), sorted(first.keys() - item.keys())
        named, first_named = (item.get('index', '?'), first.get('index', '?'))
        differ = (f'has {extra}, which item {first_named} lacks' if extra
                  else f'lacks {missing}, which item {first_named} has')
        raise ValueError(f'retrieval_collate: dataset item {named} {differ}: the items of a batch '
                         'must carry the same keys. xmr\'s ConcatDataset refuses children of '
                         'other keys as it is built; a dataset of its own that mixes items '
                         'of other keys (translated_texts, back_translated_languages) must '
                         'build them alike')


def _check_same_shape(items: Sequence[dict[str, Any]], key: str) -> None:
    """Refuse tensors under ``key`` of other shapes than the first item's, which
    ``torch.stack`` refuses naming only positions in the batch.

    Raises:
        ValueError: naming the two items (by their ``index``) and both shapes.
    """
    first = items[0]
    for item in items[1:]:
        if item[key].shape != first[key].shape:
            raise ValueError(
                f"retrieval_collate: dataset item {item.get('index', '?')} has {key} of shape "
                f"{list(item[key].shape)}, item {first.get('index', '?')} "
                f'{list(first[key].shape)}: the items of a batch are stacked. Their datasets '
                "resize or sample otherwise (a ConcatDataset's children): give them one "
                'transform size (image_size) and num_frames')


def kept_no_item(batch: Any) -> bool:
    """Whether ``batch`` is a :func:`retrieval_collate` batch that kept no item: every one was
    skipped as unreadable (``on_corrupt='skip'``; a damaged file alone in a batch of one, or in
    a last batch). It holds ``skipped_media`` and nothing for a model to embed."""
    return isinstance(batch, Mapping) and batch.get('batch_size') == 0


def media_keys(media_ids: Sequence[str]) -> torch.Tensor:
    """int64 ``[B]``: each id's 64-bit BLAKE2b digest, equal on every DDP rank and worker for
    one id (Python's ``hash`` of a string is salted per process); two ids of a batch share a
    key with probability ``~B² / 2⁶⁴``."""
    digests = (hashlib.blake2b(str(media_id).encode(), digest_size=8).digest()
               for media_id in media_ids)
    return torch.tensor([int.from_bytes(digest, 'little', signed=True) for digest in digests])
