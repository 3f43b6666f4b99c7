"""Cached outputs of the frozen towers: ``r^S`` per source caption, ``r^V`` per image or video.

The towers that xmr keeps frozen give the same ``r^S`` for a caption and the same ``r^V`` for an
image or a 12-frame video at every step, so they are computed once and read back from disk.
A cache is a folder:

* ``meta.json``: the key it was built under (backbone fingerprint = architecture + weights hash,
  dataset identity, a digest of every item's caption / media id, a digest of the media files'
  identity, preprocessing, storage dtype, feature kinds) and the counts;
* ``source.npy`` ``[S, E]`` / ``media.npy`` ``[M, E]``: one row per distinct source caption /
  media id, float32 or float16, memory-mapped when read;
* ``item_source.npy`` / ``item_media.npy`` ``[N]``: each dataset item's row (``-1``: media that
  could not be read), and ``item_source_hash.npy`` / ``item_media_hash.npy`` ``[N]``: a 64-bit
  hash of the item's caption / media id; their digest is part of the key, so a dataset whose
  captions changed (even with the same count) is caught when the phase starts, and each read
  checks its own item again.

Media files are identified by size and modification time (``media_identity='stat'``) or by a
SHA-256 of their bytes (``'content'``), so pixels replaced under the same media id are caught.
Space for the feature arrays is reserved before they are written (``posix_fallocate``): a full
disk is a clear error naming the folder and the bytes needed, not a SIGBUS from a memory map,
and a failed build removes its partial folder (as does the next build, for a killed one).

:class:`CachedFeatureDataset` wraps any dataset whose items carry ``source_text`` and/or
``media_id``; its items gain ``source_features`` / ``media_features`` (float32 ``[E]``) and lose
the decoded media. The training loop calls :func:`prepare_feature_caches` when a phase starts,
with the live model: the cache is built there if missing (on rank 0 under DDP), then checked
against the model's frozen weights and the dataset, and refused with
:class:`StaleFeatureCacheError` on any difference (rebuilt instead for run-owned caches,
``rebuild_if_stale``, which also rebuild a cache whose files are corrupt).
:class:`FeatureCacheHook` does the same for validation and test dataloaders. Media whose
pixels change every epoch (random crops, flips, random frame offsets) are never cached; the log
says so.
"""
from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mmengine.dist import barrier, get_dist_info
from mmengine.hooks import Hook
from mmengine.logging import print_log
from torch.utils.data import DataLoader, Dataset

from xmr.datasets.base import MediaCaptionDataset, MediaDataset
from xmr.datasets.corrupt_policy import SkippedMedia
from xmr.engine.wrappers import unwrap_model
from xmr.fileio import process_running
from xmr.registry import DATASETS, HOOKS
from xmr.utils.cli import UserError

__all__ = ['CACHE_FORMAT', 'FEATURE_KINDS', 'StaleFeatureCacheError', 'CorruptFeatureCacheError',
           'FeatureCache',
           'CachedFeatureDataset', 'FeatureCacheHook', 'prepare_feature_caches',
           'backbone_fingerprint', 'media_randomness', 'text_hash']

#: Version of the on-disk layout; a cache of another version is refused.
CACHE_FORMAT = 1
#: Feature kinds: ``source`` = ``r^S`` of ``source_text``, ``media`` = ``r^V`` of ``media_id``.
FEATURE_KINDS = ('source', 'media')
_ITEM_KEY = {'source': 'source_text', 'media': 'media_id'}
_DTYPES = ('float32', 'float16')
_MEDIA_IDENTITIES = ('stat', 'content')


class StaleFeatureCacheError(RuntimeError):
    """A feature cache does not match the model, the dataset or the preprocessing in use."""


class CorruptFeatureCacheError(StaleFeatureCacheError):
    """A file of a feature cache cannot be read or does not have the shape its meta states."""


def text_hash(text: str) -> int:
    """Stable signed 64-bit hash of a string (Python's ``hash`` changes per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode('utf-8'), digest_size=8).digest(),
                          'little', signed=True)


def backbone_fingerprint(backbone: torch.nn.Module) -> str:
    """The backbone's own ``fingerprint()`` (architecture + weights), or a hash of its weights."""
    own = getattr(backbone, 'fingerprint', None)
    if callable(own):
        return str(own())
    digest = hashlib.sha256(type(backbone).__qualname__.encode())
    for name, tensor in sorted(backbone.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def media_randomness(dataset: Dataset) -> str | None:
    """Why the dataset's media change from one epoch to the next, or ``None`` if they do not."""
    transform = getattr(dataset, 'transform', None)
    if transform is not None and getattr(transform, 'training', False):
        if getattr(transform, 'random_resized_crop', None) is not None:
            return 'its training transform takes random resized crops'
        if getattr(transform, 'hflip_prob', 0.0) > 0:
            return 'its training transform flips at random'
    if isinstance(dataset, MediaCaptionDataset) and not dataset.test_mode and \
            dataset.annotation.media_type == 'video':
        return ('its video frames are sampled at random offsets (test_mode=False; set '
                'test_mode=True for segment-centre frames)')
    return None


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _media_pipeline(dataset: Dataset) -> dict[str, Any]:
    """What decides the pixels of a dataset's media, beyond the media id."""
    pipeline: dict[str, Any] = {'transform': repr(getattr(dataset, 'transform', None))}
    if isinstance(dataset, MediaCaptionDataset):
        pipeline.update(num_frames=dataset.num_frames, test_mode=dataset.test_mode)
    return pipeline


def _item_digests(index: ItemIndex) -> dict[str, str]:
    """A digest of every item's caption / media id per kind (order and content)."""
    return {kind: hashlib.blake2b(hashes.tobytes(), digest_size=16).hexdigest()
            for kind, hashes in index.hashes.items()}


def _media_files_identity(dataset: Dataset, identity: str) -> dict[str, str] | None:
    """A digest of the identity of every media file (``None`` for media not read from files).

    ``'stat'`` hashes each file's size and modification time (one ``stat`` per file);
    ``'content'`` hashes its bytes (reads every file; for file systems that keep mtimes).
    """
    if not isinstance(dataset, MediaCaptionDataset):
        return None
    digest = hashlib.blake2b(identity.encode(), digest_size=16)
    for record in dataset.records:
        path = dataset.media_path(record)
        digest.update(f'{record.media_id}|{path.name}|'.encode())
        if not path.is_file():
            digest.update(b'missing')
        elif identity == 'stat':
            stat = path.stat()
            digest.update(f'{stat.st_size}|{stat.st_mtime_ns}'.encode())
        else:
            with open(path, 'rb') as handle:
                digest.update(hashlib.file_digest(handle, 'sha256').digest())
    return {'identity': identity, 'digest': digest.hexdigest()}


def _tokenizer_identity(tokenizer: Any) -> dict[str, Any]:
    return {'type': type(tokenizer).__qualname__,
            'max_length': getattr(tokenizer, 'max_length', None),
            'vocab_size': getattr(tokenizer, 'vocab_size', None),
            'pad_id': getattr(tokenizer, 'pad_id', None)}


class FeatureCache:
    """A built cache folder, opened for reading.

    Args:
        path: the cache folder (holding ``meta.json``).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        meta_file = self.path / 'meta.json'
        if not meta_file.is_file():
            raise FileNotFoundError(f'no feature cache at {self.path} (missing meta.json)')
        try:
            self.meta: dict[str, Any] = json.loads(meta_file.read_text())
        except ValueError as error:
            raise CorruptFeatureCacheError(
                f'{meta_file}: not a feature cache meta file ({error}); delete {self.path} to '
                'rebuild it') from error
        if not isinstance(self.meta, dict) or not {'key', 'counts'} <= set(self.meta):
            raise CorruptFeatureCacheError(f'{meta_file}: not a feature cache meta file (no key '
                                           f'and counts); delete {self.path} to rebuild it')
        self._arrays: dict[str, np.ndarray] = {}
        self._pid: int | None = None

    @property
    def key(self) -> dict[str, Any]:
        return self.meta['key']

    @property
    def kinds(self) -> list[str]:
        return list(self.key['features'])

    def check(self, key: dict[str, Any]) -> None:
        """Refuse the cache unless it was built under exactly ``key``.

        Raises:
            StaleFeatureCacheError: naming each differing field with both values.
        """
        built = self.key
        fields = sorted(set(built) | set(key))
        differences = [f'{name}: cache has {built.get(name)!r}, now {key.get(name)!r}'
                       for name in fields if built.get(name) != key.get(name)]
        if differences:
            raise StaleFeatureCacheError(
                f'feature cache {self.path} is stale or belongs to another setup:\n  '
                + '\n  '.join(differences)
                + '\nRebuild it (tools/cache_features.py CONFIG --overwrite, or delete the '
                'folder to rebuild on first use).')

    def verify(self) -> None:
        """Open every array and check its length against the meta, naming a file that fails.

        Raises:
            CorruptFeatureCacheError: a file missing, unreadable (truncated) or of the wrong
                length.
        """
        counts = self.meta['counts']
        expected = {kind: counts[kind] for kind in self.kinds}
        expected.update({f'item_{kind}{suffix}': counts['items'] for kind in self.kinds
                         for suffix in ('', '_hash')})
        for name, rows in expected.items():
            file = self.path / f'{name}.npy'
            try:
                length = len(self.array(name))
            except (OSError, ValueError) as error:
                raise CorruptFeatureCacheError(
                    f'{file}: unreadable ({error}); delete {self.path} to rebuild it') from error
            if length != rows:
                raise CorruptFeatureCacheError(
                    f'{file}: {length} rows where meta.json states {rows}; delete {self.path} '
                    'to rebuild it')

    def array(self, name: str) -> np.ndarray:
        """A memory-mapped array of the cache, opened once per process (DataLoader workers)."""
        if self._pid != os.getpid():
            self._arrays, self._pid = {}, os.getpid()
        if name not in self._arrays:
            self._arrays[name] = np.load(self.path / f'{name}.npy', mmap_mode='r')
        return self._arrays[name]

    def __getstate__(self) -> dict[str, Any]:
        # Memory maps are reopened in each worker rather than pickled as copies.
        return {**self.__dict__, '_arrays': {}, '_pid': None}

    @classmethod
    def build(cls, path: str | os.PathLike, dataset: Dataset, model: torch.nn.Module,
              key: dict[str, Any], batch_size: int = 64, num_workers: int = 0,
              overwrite: bool = False, index: ItemIndex | None = None) -> FeatureCache:
        """Encode every distinct source caption and media of ``dataset`` with ``model``.

        The folder is written under a temporary name and renamed when complete, so an
        interrupted build never leaves a cache that looks valid.

        Args:
            path: the cache folder to create.
            dataset: the dataset to cache (its items carry ``source_text`` / ``media_id``).
            model: the retriever whose frozen towers and data preprocessor encode.
            key: from :meth:`CachedFeatureDataset.cache_key`; ``key['features']`` says which
                kinds to compute and ``key['dtype']`` how to store them.
            batch_size: captions or media per forward pass.
            num_workers: DataLoader workers decoding the media.
            overwrite: replace an existing cache.
            index: the dataset's :class:`ItemIndex` when the caller already read it.
        """
        path = Path(path)
        if path.exists() and not overwrite:
            raise FileExistsError(f'feature cache {path} exists; pass overwrite=True to rebuild')
        _remove_abandoned_builds(path)
        partial = path.with_name(f'{path.name}.partial-{os.getpid()}')
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
        try:
            cls._build_into(partial, dataset, model, key, batch_size, num_workers,
                            index or _index_items(dataset, key['features']))
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        if path.exists():
            shutil.rmtree(path)
        partial.rename(path)
        return cls(path)

    @staticmethod
    def _build_into(partial: Path, dataset: Dataset, model: torch.nn.Module, key: dict[str, Any],
                    batch_size: int, num_workers: int, index: ItemIndex) -> None:
        kinds = list(key['features'])
        started = time.perf_counter()
        rows, first_item, hashes = index.rows, index.first_item, index.hashes
        counts = {}
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                if 'source' in kinds:
                    counts['source'] = _encode_sources(partial, model, list(first_item['source']),
                                                       key['dtype'], batch_size)
                if 'media' in kinds:
                    missing = _encode_media(partial, dataset, model, first_item['media'],
                                            key['dtype'], batch_size, num_workers)
                    counts['media'] = len(first_item['media'])
                    counts['unreadable_media'] = len(missing)
                    rows['media'][np.isin(rows['media'], list(missing))] = -1
        finally:
            model.train(was_training)
        for kind in kinds:
            np.save(partial / f'item_{kind}.npy', rows[kind])
            np.save(partial / f'item_{kind}_hash.npy', hashes[kind])
        meta = dict(key=key, counts=dict(items=len(dataset), **counts),
                    seconds=round(time.perf_counter() - started, 1))
        (partial / 'meta.json').write_text(json.dumps(meta, indent=2, sort_keys=True))


def _remove_abandoned_builds(path: Path) -> None:
    """Delete ``<path>.partial-<pid>`` folders of builds whose process is gone (killed)."""
    for partial in path.parent.glob(f'{path.name}.partial-*'):
        pid = partial.name.rsplit('-', 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not process_running(int(pid)):
            shutil.rmtree(partial, ignore_errors=True)


@dataclass
class ItemIndex:
    """Where each item of a dataset finds its cached features, per kind.

    Attributes:
        rows: ``rows[kind]`` ``[N]``: the feature row of each item.
        first_item: ``first_item[kind]`` ``{value: first item index}`` in row order.
        hashes: ``hashes[kind]`` ``[N]``: :func:`text_hash` of each item's caption / media id.
    """

    rows: dict[str, np.ndarray]
    first_item: dict[str, dict[str, int]]
    hashes: dict[str, np.ndarray]


def _index_items(dataset: Dataset, kinds: Sequence[str]) -> ItemIndex:
    """Read every item once (captions and media ids only) into an :class:`ItemIndex`.

    Media are not decoded for this pass when the dataset can skip them (``with_media``); it
    still costs one ``__getitem__`` per item, so a phase start runs it once for the cache key
    and the build together.
    """
    rows = {kind: np.empty(len(dataset), dtype=np.int64) for kind in kinds}
    hashes = {kind: np.empty(len(dataset), dtype=np.int64) for kind in kinds}
    first_item: dict[str, dict[str, int]] = {kind: {} for kind in kinds}
    row_of: dict[str, dict[str, int]] = {kind: {} for kind in kinds}
    with _media_decoding(dataset, False):
        for index in range(len(dataset)):
            item = dataset[index]
            if isinstance(item, SkippedMedia) or item is None:
                raise ValueError(f'dataset item {index} was skipped while only its captions '
                                 'were read; a feature cache needs every item')
            for kind in kinds:
                value = item.get(_ITEM_KEY[kind])
                if not isinstance(value, str):
                    raise KeyError(f"dataset item {index} has no '{_ITEM_KEY[kind]}' string; "
                                   f"the '{kind}' feature cache is keyed by it")
                if value not in row_of[kind]:
                    row_of[kind][value] = len(row_of[kind])
                    first_item[kind][value] = index
                rows[kind][index] = row_of[kind][value]
                hashes[kind][index] = text_hash(value)
    return ItemIndex(rows, first_item, hashes)


class _media_decoding:
    """Temporarily switch a :class:`MediaDataset`'s media decoding on or off."""

    def __init__(self, dataset: Dataset, enabled: bool) -> None:
        self.dataset = dataset if isinstance(dataset, MediaDataset) else None
        self.enabled = enabled

    def __enter__(self) -> None:
        if self.dataset is not None:
            self.previous = self.dataset.with_media
            self.dataset.with_media = self.enabled

    def __exit__(self, *exc: object) -> None:
        if self.dataset is not None:
            self.dataset.with_media = self.previous


def _open_rows(folder: Path, name: str, rows: int, width: int, dtype: str) -> np.ndarray:
    """A writable ``[rows, width]`` memory map whose disk blocks are reserved up front.

    Writing to a memory map on a full disk kills the process with SIGBUS; reserving the
    blocks first turns that into an error raised here.

    Raises:
        UserError: no room for the file (names the folder, the bytes needed and those free).
    """
    file = folder / f'{name}.npy'
    array = np.lib.format.open_memmap(file, mode='w+', dtype=dtype, shape=(rows, width))
    _reserve(file, file.stat().st_size)
    return array


def _reserve(file: Path, size: int) -> None:
    """Allocate ``size`` bytes of ``file`` on disk, or check the free space where the file
    system (or platform) cannot allocate ahead."""
    allocate = getattr(os, 'posix_fallocate', None)
    try:
        if allocate is not None:
            with open(file, 'r+b') as handle:
                allocate(handle.fileno(), 0, size)
            return
    except OSError as error:
        if error.errno == errno.ENOSPC:
            _raise_no_space(file, size)
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
    if shutil.disk_usage(file.parent).free < size:
        _raise_no_space(file, size)


def _raise_no_space(file: Path, size: int) -> None:
    free = shutil.disk_usage(file.parent).free
    raise UserError(file.parent, f'no space for the feature cache: {file.name} needs '
                    f'{size:,} bytes, {free:,} are free',
                    'free space, or set cache_dir (or --work-dir) on a larger disk')


def _encode_sources(folder: Path, model: torch.nn.Module, texts: list[str], dtype: str,
                    batch_size: int) -> int:
    out = None
    for start in range(0, len(texts), batch_size):
        batch = model.data_preprocessor(dict(source_text=texts[start:start + batch_size]))
        features = model.encode_source(batch['source_tokens']).float().cpu().numpy()
        if out is None:
            out = _open_rows(folder, 'source', len(texts), features.shape[1], dtype)
        out[start:start + len(features)] = features
    if out is not None:
        out.flush()
    return len(texts)


class _RowMedia(Dataset):
    """``(row, media)`` of the first item of each distinct media; ``media`` is ``None`` when
    the file could not be read (``on_corrupt='skip'``)."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, row: int) -> tuple[int, torch.Tensor | None]:
        item = self.dataset[self.indices[row]]
        if item is None or isinstance(item, SkippedMedia):
            return row, None
        return row, item['media']


def _collate_row_media(pairs: Sequence[tuple[int, torch.Tensor | None]]
                       ) -> tuple[list[int], torch.Tensor | None]:
    kept = [(row, media) for row, media in pairs if media is not None]
    if not kept:
        return [], None
    return [row for row, _ in kept], torch.stack([media for _, media in kept])


def _encode_media(folder: Path, dataset: Dataset, model: torch.nn.Module,
                  first_item: dict[str, int], dtype: str, batch_size: int,
                  num_workers: int) -> set[int]:
    """Write ``media.npy``; return the rows whose media could not be read."""
    rows_media = _RowMedia(dataset, list(first_item.values()))
    loader = DataLoader(rows_media, batch_size=batch_size, num_workers=num_workers,
                        collate_fn=_collate_row_media)
    done: set[int] = set()
    out = None
    with _media_decoding(dataset, True):
        for rows, media in loader:
            if media is None:
                continue
            data = model.data_preprocessor(dict(media=media))
            features = model.encode_media(data['media']).float().cpu().numpy()
            if out is None:
                out = _open_rows(folder, 'media', len(rows_media), features.shape[1], dtype)
            out[rows] = features
            done.update(rows)
    if out is None:
        raise ValueError('no media of the dataset could be read; nothing to cache')
    out.flush()
    return set(range(len(rows_media))) - done


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
        build_if_missing: build the cache on first use (by rank 0 under DDP) when the folder
            does not exist; ``False`` raises instead (build it with ``tools/cache_features.py``).
        rebuild_if_stale: rebuild a cache built under another key instead of refusing it; for
            caches a run owns (``cache_features`` phases, in the work dir), so that phases over
            one dataloader share a cache and a phase after one that trained the towers gets
            fresh features.
        batch_size: captions or media per forward pass while building.
        num_workers: DataLoader workers decoding media while building.
        media_identity: how a media file's identity enters the key: ``'stat'`` (size and
            modification time, one ``stat`` per file at each phase start) or ``'content'``
            (SHA-256 of the bytes: reads every file, for copies that reset mtimes).
    """

    def __init__(self, dataset: Dataset | dict, cache_dir: str | os.PathLike,
                 dtype: str = 'float32', features: Sequence[str] | None = None,
                 cache_media_when_random: bool = False, build_if_missing: bool = True,
                 rebuild_if_stale: bool = False, batch_size: int = 64,
                 num_workers: int = 0, media_identity: str = 'stat') -> None:
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
        self.num_workers = num_workers
        self.kinds = self._choose_kinds()
        if 'media' in self.kinds and isinstance(self.dataset, MediaDataset):
            # Cached media are never decoded for training; the build switches decoding back on.
            self.dataset.with_media = False
        self.cache: FeatureCache | None = None

    @property
    def metainfo(self) -> dict[str, Any]:
        return dict(getattr(self.dataset, 'metainfo', {}))

    def _choose_kinds(self) -> list[str]:
        with _media_decoding(self.dataset, False):
            sample = self.dataset[0] if len(self.dataset) else {}
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
            preprocessing['source_tokenizer'] = _tokenizer_identity(
                preprocessor.source_tokenizer)
        if 'media' in self.kinds:
            preprocessing.update(
                media=_media_pipeline(self.dataset),
                mean=[round(float(v), 6) for v in preprocessor.mean.flatten()],
                std=[round(float(v), 6) for v in preprocessor.std.flatten()])
        # Paths are left out so that a cache moves with its data; item hashes pin the content.
        metainfo = {k: v for k, v in self.metainfo.items() if k != 'ann_file'}
        dataset = {'type': type(self.dataset).__qualname__, 'items': len(self.dataset),
                   'metainfo': _jsonable(metainfo)}
        key = dict(format=CACHE_FORMAT, backbone=backbone_fingerprint(model.backbone),
                   dataset=dataset,
                   item_digests=_item_digests(index or _index_items(self.dataset, self.kinds)),
                   preprocessing=preprocessing, dtype=self.dtype, features=list(self.kinds))
        if 'media' in self.kinds:
            key['media_files'] = _media_files_identity(self.dataset, self.media_identity)
        return _jsonable(key)

    def prepare(self, model: torch.nn.Module) -> None:
        """Open (building if missing) and check the cache against the live ``model``.

        Raises:
            StaleFeatureCacheError: when the cache was built for other weights, data or
                preprocessing, or when the phase trains the backbone (features would go stale).
        """
        model = unwrap_model(model)
        trained = [name for name, p in model.backbone.named_parameters() if p.requires_grad]
        if trained:
            raise StaleFeatureCacheError(
                f'feature cache {self.cache_dir}: this phase trains the backbone '
                f'({trained[0]}, ...), so its features change every step; use the plain '
                'dataset for this phase')
        index = _index_items(self.dataset, self.kinds)
        key = self.cache_key(model, index)
        rank, _ = get_dist_info()
        # Rank 0 alone decides and (re)builds; the others wait, then open what it left.
        exists = rank == 0 and (self.cache_dir / 'meta.json').is_file()
        stale = exists and self.rebuild_if_stale and not self._usable(key)
        if rank == 0 and (not exists or stale):
            if not exists and not self.build_if_missing:
                raise FileNotFoundError(f'no feature cache at {self.cache_dir}; build it with '
                                        'tools/cache_features.py or set build_if_missing=True')
            print_log(f'{"rebuilding stale" if stale else "building"} feature cache '
                      f'{self.cache_dir} ({", ".join(self.kinds)}) for {len(self.dataset)} '
                      'items', logger='current')
            built = FeatureCache.build(self.cache_dir, self.dataset, model, key,
                                       self.batch_size, self.num_workers, overwrite=stale,
                                       index=index)
            print_log(f'feature cache {self.cache_dir} built in {built.meta["seconds"]} s: '
                      f'{built.meta["counts"]}', logger='current')
        barrier()
        cache = FeatureCache(self.cache_dir)
        cache.check(key)
        cache.verify()
        self.cache = cache
        print_log(f'feature cache {self.cache_dir}: reading {", ".join(self.kinds)} features '
                  f'({self.dtype})', logger='current')

    def _usable(self, key: dict[str, Any]) -> bool:
        """Whether the existing cache has ``key`` and intact files (logs why not)."""
        try:
            cache = FeatureCache(self.cache_dir)
            cache.verify()
        except CorruptFeatureCacheError as error:
            print_log(f'feature cache {self.cache_dir} is corrupt: {error}', logger='current',
                      level=logging.WARNING)
            return False
        return cache.key == key

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any] | SkippedMedia | None:
        if self.cache is None:
            raise RuntimeError(f'feature cache {self.cache_dir} is not prepared: the training '
                               'loop prepares it at phase start (prepare_feature_caches); '
                               'call prepare(model) when using the dataset directly')
        item = self.dataset[index]
        if item is None or isinstance(item, SkippedMedia):
            return item
        item = dict(item)
        for kind in self.kinds:
            value = item[_ITEM_KEY[kind]]
            if text_hash(value) != int(self.cache.array(f'item_{kind}_hash')[index]):
                raise StaleFeatureCacheError(
                    f'feature cache {self.cache_dir}: item {index} has {_ITEM_KEY[kind]} '
                    f'{value!r}, which is not the one the cache was built from; the dataset '
                    'changed since, rebuild the cache')
            row = int(self.cache.array(f'item_{kind}')[index])
            if row < 0:
                return SkippedMedia(index=index, media_path=str(value),
                                    reason='unreadable when the feature cache was built')
            item[f'{kind}_features'] = torch.from_numpy(
                np.array(self.cache.array(kind)[row], dtype=np.float32))
        if 'media' in self.kinds:
            item['media'] = None
        return item

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(cache_dir={str(self.cache_dir)!r}, kinds={self.kinds}, '
                f'dtype={self.dtype!r}, dataset={self.dataset!r})')


def _datasets_of(loader: Any) -> Iterable[Dataset]:
    for inner in getattr(loader, 'loaders', [loader]):
        dataset = getattr(inner, 'dataset', inner)
        if dataset is not None:
            yield dataset


def prepare_feature_caches(loader: Any, model: torch.nn.Module) -> None:
    """Prepare every :class:`CachedFeatureDataset` behind a dataloader (or loader sequence).

    Other datasets are left alone, so the loops call this unconditionally.
    """
    for dataset in _datasets_of(loader):
        if isinstance(dataset, CachedFeatureDataset):
            dataset.prepare(model)


@HOOKS.register_module()
class FeatureCacheHook(Hook):
    """Prepares cached validation and test galleries before each evaluation run.

    Training phases are prepared by :class:`~xmr.engine.loops.PhasedTrainLoop` itself; add
    this hook when a validation or test dataset is a :class:`CachedFeatureDataset`.
    """

    def before_val(self, runner) -> None:
        prepare_feature_caches(runner.val_loop.dataloader, runner.model)

    def before_test(self, runner) -> None:
        prepare_feature_caches(runner.test_loop.dataloader, runner.model)
