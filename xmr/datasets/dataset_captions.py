"""A config's dataset read for its captions alone, without loading any media."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mmengine.registry import DefaultScope

from xmr.registry import DATASETS


class NoCaptions(ValueError):
    """A config or dataset to take captions from that holds none: a config without a single
    loader of the split, a dataset that does not expose its captions."""


def split_dataset(cfg: Mapping[str, Any], split: str, config: str) -> Any:
    """The dataset of ``cfg``'s ``<split>_dataloader`` (``'train'``, ``'val'``, ``'test'``).

    Raises:
        NoCaptions: ``config`` (the file's name, for the message) has no single
            ``<split>_dataloader``: none, or a list of them.
    """
    if not isinstance(cfg.get(f'{split}_dataloader'), Mapping):
        raise NoCaptions(f'config {config} has no single {split}_dataloader to take captions '
                         'from')
    return split_datasets(cfg, split, config)[0]


def split_datasets(cfg: Mapping[str, Any], split: str, config: str) -> list[Any]:
    """The datasets of ``cfg``'s ``<split>_dataloader``: one, or each of a list (a paper's
    several test sets, which ``MultiDatasetTestLoop`` scores one after the other).

    Raises:
        NoCaptions: ``config`` (the file's name, for the message) has no ``<split>_dataloader``,
            or one without a ``dataset``.
    """
    loaders = cfg.get(f'{split}_dataloader')
    loaders = list(loaders) if isinstance(loaders, (list, tuple)) else [loaders]
    if not loaders or not all(isinstance(loader, Mapping) and 'dataset' in loader
                              for loader in loaders):
        raise NoCaptions(f'config {config} has no {split}_dataloader with a dataset to take '
                         'captions from')
    with DefaultScope.overwrite_default_scope('xmr'):
        return [DATASETS.build(loader['dataset']) for loader in loaders]


def dataset_captions(dataset: Any, lang: str, limit: int | None = None,
                     field: str = 'captions') -> list[str]:
    """The captions in ``lang`` of ``dataset``, item by item, the first ``limit`` of them
    (``None``: all); with ``field='back_translations'``, their machine translations into the
    source language (:class:`~xmr.datasets.annotation.MediaRecord`'s field).

    Reads a dataset's ``captions_of`` (the queries its items give: a gallery's machine
    translations for its ``translated_languages``, the synthetic sets' captions) or else its
    annotation records (:class:`~xmr.datasets.base.MediaCaptionDataset`'s ``records``), without
    loading any media; of a cached gallery
    (:class:`~xmr.engine.feature_cache.CachedFeatureDataset`), those of the dataset it caches.

    Raises:
        NoCaptions: a dataset that exposes neither (nor, for another ``field``, records).
    """
    from xmr.engine.feature_cache.dataset import source_dataset  # it imports xmr.datasets

    dataset = source_dataset(dataset)
    if hasattr(dataset, 'captions_of') and field == 'captions':
        per_item = (dataset.captions_of(i).get(lang, []) for i in range(len(dataset)))
    elif hasattr(dataset, 'records'):
        per_item = (getattr(record, field).get(lang, []) for record in dataset.records)
    elif field == 'captions':
        raise NoCaptions(f'{type(dataset).__name__} exposes neither annotation records nor '
                         'captions_of')
    else:
        raise NoCaptions(f'{type(dataset).__name__} exposes no annotation records to read '
                         f'{field} from')
    captions: list[str] = []
    for item in per_item:
        captions.extend(item)
        if limit is not None and len(captions) >= limit:
            return captions[:limit]
    return captions
