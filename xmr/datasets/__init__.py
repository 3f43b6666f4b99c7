"""Datasets, annotation loaders and batch assembly.

Item contract (every dataset of xmr):

* training pairs: ``dict(media=uint8 Tensor [3, H, W] or [T, 3, H, W], media_id=str,
  source_text=str, target_text=str | None, lang=str, index=int)``;
* retrieval evaluation: ``dict(media=..., media_id=str, captions={lang: [str, ...]}, index=int)``.

Media arrive resized and cropped to the backbone's resolution as uint8; the model's data
preprocessor normalises them. Under ``on_corrupt='skip'`` an unreadable file's item is a
``SkippedMedia`` marker, which ``retrieval_collate`` drops (listing its path in
``batch['skipped_media']``). Formats, converters and pipelines: ``docs/data.md``.

The names below import their module on first access, so that the converters
(``xmr.datasets.converters``, plain Python) start without loading torch; the registries import
the modules that register (:data:`xmr.registry.LOCATIONS`).
"""
from __future__ import annotations

from typing import Any

from xmr.utils.lazy import lazy_attribute

#: Each public name and the module that defines it.
_HOMES = {
    'Annotation': 'annotation', 'AnnotationError': 'annotation', 'MediaRecord': 'annotation',
    'dump_annotation': 'annotation', 'load_annotation': 'annotation',
    'RecordStore': 'record_store',
    'MediaCaptionDataset': 'base', 'CaptionPairDataset': 'pairs',
    'RetrievalDataset': 'retrieval', 'retrieval_collate': 'collate',
    'ConcatDataset': 'concat',
    'MediaSkippedWarning': 'corrupt_policy', 'SkippedMedia': 'corrupt_policy',
    'MediaReadError': 'media_io', 'read_image': 'media_io', 'read_video_frames': 'media_io',
    'uniform_frame_indices': 'frame_sampling', 'MediaTransform': 'transforms',
    'GlobalBatchSampler': 'language_batch_sampler',
    'LanguageBatchSampler': 'language_batch_sampler',
    'SampleIndex': 'sample_keys', 'sample_draws': 'sample_keys',
}

__all__ = [*_HOMES, 'synthetic']


def __getattr__(name: str) -> Any:
    """A public name from its module, or a subpackage (``synthetic``), on first access."""
    return lazy_attribute(__name__, name, _HOMES)
