"""The dataset wrapper that serves cached tower features, and their preparation per loader."""
from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from mmengine.dist import is_distributed
from mmengine.logging import print_log
from torch.utils.data import Dataset

from xmr.datasets.base import MediaDataset
from xmr.datasets.corrupt_policy import SkippedMedia, warned
from xmr.datasets.media_io import MediaReadError
from xmr.engine.feature_cache.key import (
    FEATURE_KINDS,
    ITEM_KEY,
    ItemIndex,
    backbone_fingerprint,
    changed_media_files,
    index_items,
    item_digests,
    jsonable,
    media_decoding,
    media_files_identity,
    media_pipeline,
    media_randomness,
    text_hash,
    tokenizer_identity,
)
from xmr.engine.feature_cache.ranks import BuildRanks
from xmr.engine.feature_cache.store import (
    CACHE_FORMAT,
    CorruptFeatureCacheError,
    FeatureCache,
    StaleFeatureCacheError,
)
from xmr.engine.worker_signals import end_workers
from xmr.engine.wrappers import unwrap_model
from xmr.models.backbones.base import ENCODING_VERSION
from xmr.models.losses.distributed import gloo_group_beside
from xmr.registry import DATASETS

_DTYPES = ('float32', 'float16')
_MEDIA_IDENTITIES = ('stat', 'content')

#: How long a rank of a DDP run waits for the others at a step of a cache build, from the step's
#: start: for the slowest rank's share of the rows, or rank 0's assembly. A share decodes its
#: media files (minutes for COCO, hours for CC3M or videos), past the default group's timeout
#: (NCCL's 10 minutes, gloo's 30), which stopped the waiting ranks and the run; a rank whose
#: build fails, or whose process ends, fails the others at once, named
#: (:class:`~xmr.engine.feature_cache.ranks.RankFailedError`), rather than through this timeout.
BUILD_WAIT = timedelta(hours=24)


@DATASETS.register_module()
class CachedFeatureDataset(Dataset):
    """Adds cached frozen-tower features to the items of another dataset.

    Items are the wrapped dataset's with ``source_features`` (``r^S`` of ``source_text``) and
    ``media_features`` (``r^V`` of the media), float32 ``[E]``; when media features are
    cached, ``media`` is ``None`` (a :class:`MediaDataset` then skips decoding). The
    retriever uses these in place of its frozen towers.

    Config::

        train_dataloader = dict(
            dataset=dict(type='CachedFeatureDataset', cache_dir='data/cache/cc300k_vitb32',
                         dataset=dict(type='CaptionPairDataset', ann_file=...)),
            ...)

    Args:
        dataset: the wrapped dataset, or its ``DATASETS`` config.
        cache_dir: the cache folder (one per dataset split and backbone).
        dtype: storage precision, ``'float32'`` or ``'float16'`` (half the disk and page
            cache; features are read back as float32).
        features: kinds to cache among :data:`FEATURE_KINDS`; ``None`` caches ``source`` when
            items carry ``source_text`` and ``media`` when they carry media.
        cache_media_when_random: leave at ``False``: media whose pixels change each epoch are
            not cached (the log says so). ``True`` caches one fixed draw instead and is only
            for measuring.
        build_if_missing: build the cache on first use (by every rank under DDP, each its
            share of the rows) when the folder does not exist; ``False`` raises instead
            (build it with ``tools/cache_features.py``).
        rebuild_if_stale: rebuild a cache built under another key instead of refusing it; for
            caches a run owns (``cache_features`` phases, in the work dir), so that phases over
            one dataloader share a cache and a phase after one that trained the towers gets
            fresh features.
        batch_size: captions or media per forward pass while building.
        num_workers: DataLoader workers decoding media while building; ``None``: as many as
            the dataloader it is prepared for has (:func:`prepare_feature_caches`; the phase's
            loader, ``tools/cache_features.py`` reads the config's), ``0`` (the main process)
            when it is prepared alone. The workers ignore SIGTERM and SIGINT, which a
            preemption sends the whole job, as the training loaders' workers do.
        media_identity: how a media file's identity enters the key: ``'stat'`` (size and
            modification time, one ``stat`` per file at each phase start) or ``'content'``
            (SHA-256 of the bytes: reads every file, for copies that reset mtimes).
    """

    def __init__(self, dataset: Dataset | dict, cache_dir: str | os.PathLike,
                 dtype: str = 'float32', features: Sequence[str] | None = None,
                 cache_media_when_random: bool = False, build_if_missing: bool = True,
                 rebuild_if_stale: bool = False, batch_size: int = 64,
                 num_workers: int | None = None, media_identity: str = 'stat') -> None:
        self.dataset = DATASETS.build(dataset) if isinstance(dataset, dict) else dataset
        self.cache_dir = Path(cache_dir)
        if dtype not in _DTYPES:
            raise ValueError(f'CachedFeatureDataset dtype must be one of {_DTYPES}, got {dtype!r}')
        if media_identity not in _MEDIA_IDENTITIES:
            raise ValueError(f'CachedFeatureDataset media_identity must be one of '
                             f'{_MEDIA_IDENTITIES}, got {media_identity!r}')
        self.media_identity = media_identity
        self.dtype = dtype
        if features is not None:
            unknown = set(features) - set(FEATURE_KINDS)
            if unknown or not features:
                raise ValueError(f'features must be a non-empty subset of {FEATURE_KINDS}, got '
                                 f'{list(features)}')
        self.requested = None if features is None else list(features)
        self.cache_media_when_random = cache_media_when_random
        self.build_if_missing = build_if_missing
        self.rebuild_if_stale = rebuild_if_stale
        self.batch_size = batch_size
        if num_workers is not None and (not isinstance(num_workers, int) or num_workers < 0):
            raise ValueError(f'CachedFeatureDataset num_workers must be an int >= 0 or None (the '
                             f"loader's), got {num_workers!r}")
        self.num_workers = num_workers
        self.kinds = self._choose_kinds()
        if 'media' in self.kinds and isinstance(self.dataset, MediaDataset):
            # Cached media are never decoded for training; the build switches decoding back on.
            self.dataset.with_media = False
        self.cache: FeatureCache | None = None
        #: Each media file's identity at the last key (:func:`media_files_identity`), until
        #: :meth:`prepare` has checked the cache with it.
        self.media_files: list[tuple[str, str]] = []

    @property
    def metainfo(self) -> dict[str, Any]:
        return dict(getattr(self.dataset, 'metainfo', {}))

    def check_media_exist(self) -> None:
        """The wrapped dataset's check (``check_media_exist``) of the media a cache of media
        features is built from, whose decoding the wrapper switched off: unchecked, a missing
        file stopped the build at the first one, named as if it alone were missing."""
        check = getattr(self.dataset, 'check_media_exist', None)
        if 'media' in self.kinds and check is not None:
            with media_decoding(self.dataset, True):
                check()

    def _choose_kinds(self) -> list[str]:
        self._check_not_empty()
        with media_decoding(self.dataset, False):
            sample = self.dataset[0]
        has_media = 'media_id' in sample and (
            sample.get('media') is not None or isinstance(self.dataset, MediaDataset)
            and self.dataset.with_media)
        kinds = self.requested or [kind for kind, present in
                                   (('source', isinstance(sample.get('source_text'), str)),
                                    ('media', has_media)) if present]
        reason = media_randomness(self.dataset)
        if 'media' in kinds and reason is not None and not self.cache_media_when_random:
            kinds = [kind for kind in kinds if kind != 'media']
            print_log(f'feature cache {self.cache_dir}: media features are not cached because '
                      f'{reason}; the image tower runs every step', logger='current')
        if not kinds:
            raise ValueError(f'nothing to cache for {type(self.dataset).__name__}: its items '
                             'carry neither source_text nor fixed media')
        return kinds

    def _check_not_empty(self) -> None:
        """Refuse an empty dataset: its cache would hold no feature arrays, which the cache's
        own check calls corrupt, rebuilt as often as it is deleted."""
        if len(self.dataset):
            return
        ann_file = getattr(self.dataset, 'ann_file', None)
        read = f' read from {ann_file}' if ann_file else ''
        raise ValueError(f'feature cache {self.cache_dir}: the {type(self.dataset).__name__}'
                         f'{read} is empty (0 items), so there is nothing to cache; give it '
                         'items or leave its CachedFeatureDataset out')

    def cache_key(self, model: torch.nn.Module, index: ItemIndex | None = None
                  ) -> dict[str, Any]:
        """The key the cache must have been built under, for ``model`` and this dataset.

        Args:
            model: the retriever whose frozen towers the features come from.
            index: the dataset's :class:`ItemIndex` when the caller already read it.
        """
        preprocessor = model.data_preprocessor
        preprocessing: dict[str, Any] = {}
        if 'source' in self.kinds:
            # The prompt is written before each caption, and a tokenizer that writes language
            # tokens (NLLB's) starts each caption with the source language's.
            preprocessing.update(
                source_tokenizer=tokenizer_identity(preprocessor.source_tokenizer),
                source_prompt=preprocessor.source_prompt,
                source_language=preprocessor.source_language)
        if 'media' in self.kinds:
            preprocessing.update(
                media=media_pipeline(self.dataset),
                mean=[round(float(v), 6) for v in preprocessor.mean.flatten()],
                std=[round(float(v), 6) for v in preprocessor.std.flatten()])
        # Paths are left out so that a cache moves with its data; item hashes pin the content.
        metainfo = {k: v for k, v in self.metainfo.items() if k != 'ann_file'}
        dataset = {'type': type(self.dataset).__qualname__, 'items': len(self.dataset),
                   'metainfo': jsonable(metainfo)}
        key = dict(format=CACHE_FORMAT, backbone=backbone_fingerprint(model.backbone),
                   dataset=dataset,
                   item_digests=item_digests(index or index_items(self.dataset, self.kinds)),
                   preprocessing=preprocessing, dtype=self.dtype, features=list(self.kinds))
        if 'source' in self.kinds:  # r^V's encoding never changed: its caches stay current
            key['encoding'] = ENCODING_VERSION
        if 'media' in self.kinds:
            key['media_files'], self.media_files = media_files_identity(self.dataset,
                                                                        self.media_identity)
        return jsonable(key)

    def prepare(self, model: torch.nn.Module, training: bool = True,
                loader_workers: int = 0, rebuild: bool = False) -> bool:
        """Open (building if missing) and check the cache against the live ``model``.

        Args:
            model: the retriever whose frozen towers the features come from.
            training: the features feed training steps, so a backbone that trains is refused
                (they would go stale at its first update). ``False`` for an evaluation: its
                weights hold still while it reads the gallery, whatever trains between
                evaluations (a stale cache is then rebuilt or refused, as for training).
            loader_workers: the workers of the dataloader the dataset is read through, which
                decode the media of a build unless the dataset's ``num_workers`` says otherwise.
            rebuild: build the cache afresh even where one is there
                (``tools/cache_features.py --overwrite``), under DDP by every rank as above.

        Returns:
            Whether the cache was built here.

        Raises:
            StaleFeatureCacheError: when the cache was built for other weights, data or
                preprocessing, or when the phase trains the backbone (features would go stale).
            RankFailedError: under DDP, another rank failed reading the dataset or building
                the cache (named, with its error).
        """
        model = unwrap_model(model)
        self._check_reads_features(model)
        trained = [name for name, p in model.backbone.named_parameters() if p.requires_grad]
        if training and trained:
            raise StaleFeatureCacheError(
                f'feature cache {self.cache_dir}: this phase trains the backbone '
                f'({trained[0]}, ...), so its features change every step; use the plain '
                'dataset for this phase')
        # Every rank makes the group at its first cache, together, before any build.
        ranks = BuildRanks(self.cache_dir, gloo_group_beside(dist.group.WORLD, BUILD_WAIT)
                           if is_distributed() else None)
        # Every rank reads the items; rank 0 alone decides whether to (re)build.
        with ranks.step('reading the dataset') as step:
            index = index_items(self.dataset, self.kinds)
            key = self.cache_key(model, index)
            step.result = self._build_needed(key, rebuild) if ranks.rank == 0 else None
        if step.results[0] is not None:
            self._build_logged(model, step.results[0], index, key, loader_workers, ranks)
        cache = FeatureCache(self.cache_dir)
        changed = (changed_media_files(cache.media_files(), self.media_files)
                   if cache.key.get('media_files') != key.get('media_files') else '')
        # Needed no further: kept, ~200 bytes a media file would stay in the training process
        # and in every worker the dataset is pickled to (570 MiB for CC3M's 3M images).
        self.media_files = []
        details = {'encoding': 'xmr encodes captions otherwise since the build '
                               '(docs/benchmarks.md, Staleness)',
                   'format': f'the layout of another xmr version; this one reads format '
                             f'{CACHE_FORMAT}'}
        if changed:
            details['media_files'] = f'changed: {changed}'
        cache.check(key, details)
        cache.verify()
        self.cache = cache
        print_log(f'feature cache {self.cache_dir}: reading {", ".join(self.kinds)} features '
                  f'({self.dtype})', logger='current')
        return step.results[0] is not None

    def _check_reads_features(self, model: torch.nn.Module) -> None:
        """Refuse a model that has no ``encode_<kind>`` for a kind cached: it neither builds
        nor reads such features (a ``DualEncoderRetriever``'s losses read the towers' tokens),
        and the build stopped at its first batch on an ``AttributeError``.

        Raises:
            TypeError: naming the cache, the model's type, what it lacks and the fix.
        """
        lacking = [f'encode_{kind}' for kind in self.kinds
                   if not callable(getattr(model, f'encode_{kind}', None))]
        if lacking:
            raise TypeError(
                f'feature cache {self.cache_dir}: {type(model).__name__} has no '
                f'{" or ".join(lacking)}, so it neither builds nor reads cached '
                f'{", ".join(self.kinds)} features (it runs its towers itself); read its data '
                'through the plain dataset (drop the phase\'s cache_features or the '
                'CachedFeatureDataset)')

    def build(self, model: torch.nn.Module, overwrite: bool = False,
              index: ItemIndex | None = None, key: dict[str, Any] | None = None,
              loader_workers: int = 0, ranks: BuildRanks | None = None) -> FeatureCache:
        """Build the cache from ``model``'s live towers (``overwrite``: replace one there),
        keeping each media file's identity so that a later change is named.

        Args:
            model: the retriever whose frozen towers encode.
            overwrite: replace an existing cache.
            index: the dataset's :class:`ItemIndex` when the caller already read it.
            key: :meth:`cache_key` when the caller already computed it (with ``index``).
            loader_workers: workers decoding the media when the dataset's ``num_workers`` is
                ``None``.
            ranks: the DDP ranks building it together, each its share of the rows
                (:meth:`FeatureCache.build`); ``None``: this process alone.
        """
        # One pass over the items serves the key and the build (2.1M pairs: 6 s a pass).
        if index is None:
            index = index_items(self.dataset, self.kinds)
        key = key or self.cache_key(model, index)
        workers = loader_workers if self.num_workers is None else self.num_workers
        return FeatureCache.build(self.cache_dir, self.dataset, model, key, self.batch_size,
                                  workers, overwrite=overwrite, index=index,
                                  media_files=self.media_files, ranks=ranks)

    def _build_needed(self, key: dict[str, Any], rebuild: bool = False) -> str | None:
        """Why the cache must be built, ``'asked'`` (``rebuild``), ``'missing'`` or ``'stale'``
        (when rebuilt then), or ``None`` to read the one there.

        Raises:
            FileNotFoundError: it is missing and not to be built here.
        """
        if rebuild:
            return 'asked'
        if not (self.cache_dir / 'meta.json').is_file():
            if not self.build_if_missing:
                raise FileNotFoundError(f'no feature cache at {self.cache_dir}; build it with '
                                        'tools/cache_features.py or set build_if_missing=True')
            return 'missing'
        return 'stale' if self.rebuild_if_stale and not self._usable(key) else None

    def _build_logged(self, model: torch.nn.Module, why: str, index: ItemIndex,
                      key: dict[str, Any], loader_workers: int, ranks: BuildRanks) -> None:
        """:meth:`build` on ``ranks`` because of ``why`` (:meth:`_build_needed`), logged by
        rank 0."""
        log = ranks.rank == 0
        if log:
            shared = (f' on {ranks.world} ranks, each encoding its share of the rows'
                      if ranks.world > 1 else '')
            doing = dict(asked='rebuilding', missing='building', stale='rebuilding stale')[why]
            print_log(f'{doing} feature cache {self.cache_dir} ({", ".join(self.kinds)}) for '
                      f'{len(self.dataset)} items{shared}', logger='current')
        built = self.build(model, overwrite=why != 'missing', index=index, key=key,
                           loader_workers=loader_workers, ranks=ranks)
        if log:
            print_log(f'feature cache {self.cache_dir} built in {built.meta["seconds"]} s: '
                      f'{built.meta["counts"]}', logger='current')

    def _usable(self, key: dict[str, Any]) -> bool:
        """Whether the existing cache has ``key`` and intact files (logs why not).

        The key is compared first: the files are verified by what the meta states of them
        (``key['features']``, ``counts``), which a meta of another layout (another xmr
        version's ``format``) need not state.
        """
        try:
            cache = FeatureCache(self.cache_dir)
            if cache.key != key:
                return False
            cache.verify()
        except CorruptFeatureCacheError as error:
            print_log(f'feature cache {self.cache_dir} is corrupt: {error}', logger='current',
                      level=logging.WARNING)
            return False
        return True

    def __len__(self) -> int:
        return len(self.dataset)

    def item_languages(self) -> Any:
        """The wrapped dataset's ``item_languages()`` (``LanguageBatchSampler`` reads it).

        Raises:
            ValueError: the wrapped dataset has none.
        """
        inner = getattr(self.dataset, 'item_languages', None)
        if inner is None:
            raise ValueError(f'CachedFeatureDataset: the {type(self.dataset).__name__} it wraps '
                             'tells no item languages (no item_languages())')
        return inner()

    def __getitem__(self, index: int) -> dict[str, Any] | SkippedMedia | None:
        if self.cache is None:
            raise RuntimeError(f'feature cache {self.cache_dir} is not prepared: the training '
                               'loop prepares it at phase start; a validation or test dataset '
                               "needs dict(type='FeatureCacheHook') in custom_hooks; call "
                               'prepare(model) when using the dataset directly')
        item = self.dataset[index]
        if item is None or isinstance(item, SkippedMedia):
            return item
        item = dict(item)
        for kind in self.kinds:
            value = item[ITEM_KEY[kind]]
            if text_hash(value) != int(self.cache.array(f'item_{kind}_hash')[index]):
                raise StaleFeatureCacheError(
                    f'feature cache {self.cache_dir}: item {index} has {ITEM_KEY[kind]} '
                    f'{value!r}, which is not the one the cache was built from; the dataset '
                    'changed since, rebuild the cache')
            row = int(self.cache.array(f'item_{kind}')[index])
            if row < 0:
                return self._skipped(index, value)
            item[f'{kind}_features'] = torch.from_numpy(
                np.array(self.cache.array(kind)[row], dtype=np.float32))
        if 'media' in self.kinds:
            item['media'] = None
        return item

    def _skipped(self, index: int, media_id: str) -> SkippedMedia:
        """The marker the dataset gave ``media_id``'s file when the cache was built (its path and
        reason), warned of as the dataset warns of it; a dataset set to ``on_corrupt='raise'``
        since raises, as it would reading the file. A cache built before xmr recorded them
        names the media id."""
        recorded = self.cache.meta.get('unreadable_media', {}).get(media_id) or dict(
            media_path=media_id, reason='unreadable when the feature cache was built')
        source = f'recorded by the feature cache {self.cache_dir}'
        if getattr(self.dataset, 'on_corrupt', 'skip') == 'raise':
            raise MediaReadError(recorded['media_path'], f"{recorded['reason']} ({source})")
        return warned(SkippedMedia(index=index, **recorded), source)

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(cache_dir={str(self.cache_dir)!r}, kinds={self.kinds}, '
                f'dtype={self.dtype!r}, dataset={self.dataset!r})')


def datasets_of(loader: Any) -> Iterable[tuple[Any, Dataset]]:
    """Each loader behind ``loader`` (a loader sequence's, or itself) and its dataset."""
    for inner in getattr(loader, 'loaders', [loader]):
        dataset = getattr(inner, 'dataset', inner)
        if dataset is not None:
            yield inner, dataset


def source_dataset(dataset: Dataset) -> Dataset:
    """The dataset a :class:`CachedFeatureDataset` reads through its cache, else ``dataset``."""
    return dataset.dataset if isinstance(dataset, CachedFeatureDataset) else dataset


def prepare_feature_caches(loader: Any, model: torch.nn.Module, training: bool = True) -> None:
    """Prepare every :class:`CachedFeatureDataset` behind a dataloader (or loader sequence).

    Other datasets are left alone, so the loops call this unconditionally. ``training`` as in
    :meth:`CachedFeatureDataset.prepare`; a build decodes the media in as many workers as the
    dataloader has, unless the dataset's ``num_workers`` says otherwise. A loader whose cache
    was built anew ends its persistent workers: theirs is a copy of the dataset made before,
    which would go on reading the replaced cache's files (a validation's rebuilt gallery).
    """
    for inner, dataset in datasets_of(loader):
        if isinstance(dataset, CachedFeatureDataset) and dataset.prepare(
                model, training, loader_workers=getattr(inner, 'num_workers', 0)):
            end_workers(inner)
