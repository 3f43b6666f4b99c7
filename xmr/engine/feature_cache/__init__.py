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
and a failed build removes its partial folder; a build stopped while encoding (killed,
interrupted) keeps it, with each rank's rows written so far recorded, and the next build of the
same key goes on from there (:mod:`~xmr.engine.feature_cache.progress`).

:class:`CachedFeatureDataset` wraps any dataset whose items carry ``source_text`` and/or
``media_id``; its items gain ``source_features`` / ``media_features`` (float32 ``[E]``) and lose
the decoded media. The training loop calls :func:`prepare_feature_caches` when a phase starts,
with the live model: the cache is built there if missing (under DDP by every rank, each its share
of the rows, a failure on one failing all: :mod:`~xmr.engine.feature_cache.ranks`), then checked
against the model's frozen weights and the dataset, and refused with
:class:`StaleFeatureCacheError` on any difference (rebuilt instead for run-owned caches,
``rebuild_if_stale``, which also rebuild a cache whose files are corrupt).
:class:`FeatureCacheHook` does the same for validation and test dataloaders. Media whose
pixels change every epoch (random crops, flips, random frame offsets, a training transform of
one's own unless it says ``draws_at_random = False``) are never cached; the log says so.
"""
from xmr.engine.feature_cache.dataset import (
    CachedFeatureDataset,
    prepare_feature_caches,
    source_dataset,
)
from xmr.engine.feature_cache.key import (
    FEATURE_KINDS,
    ItemIndex,
    backbone_fingerprint,
    media_randomness,
    text_hash,
)
from xmr.engine.feature_cache.ranks import RankFailedError, RankStoppedError
from xmr.engine.feature_cache.store import (
    CACHE_FORMAT,
    CorruptFeatureCacheError,
    FeatureCache,
    StaleFeatureCacheError,
    refuse_other_folder,
)

__all__ = ['CACHE_FORMAT', 'FEATURE_KINDS', 'CachedFeatureDataset', 'CorruptFeatureCacheError',
           'FeatureCache', 'ItemIndex', 'RankFailedError', 'RankStoppedError',
           'StaleFeatureCacheError',
           'backbone_fingerprint', 'media_randomness', 'prepare_feature_caches',
           'refuse_other_folder', 'text_hash', 'source_dataset']
