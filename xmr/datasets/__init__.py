"""Datasets, annotation loaders and batch assembly.

Item contract (every dataset of xmr):

* training pairs: ``dict(media=uint8 Tensor [3, H, W] or [T, 3, H, W], media_id=str,
  source_text=str, target_text=str | None, lang=str, index=int)``;
* retrieval evaluation: ``dict(media=..., media_id=str, captions={lang: [str, ...]}, index=int)``.

Media arrive resized and cropped to the backbone's resolution as uint8; the model's data
preprocessor normalises them. Under ``on_corrupt='skip'`` an unreadable file's item is a
``SkippedMedia`` marker, which ``retrieval_collate`` drops (listing its path in
``batch['skipped_media']``). Formats, converters and pipelines: ``docs/data.md``.
"""
from xmr.datasets import synthetic  # noqa: F401
from xmr.datasets.annotation import (
    Annotation,
    AnnotationError,
    MediaRecord,
    dump_annotation,
    load_annotation,
)
from xmr.datasets.base import MediaCaptionDataset
from xmr.datasets.collate import retrieval_collate
from xmr.datasets.corrupt_policy import MediaSkippedWarning, SkippedMedia
from xmr.datasets.frame_sampling import uniform_frame_indices
from xmr.datasets.media_io import MediaReadError, read_image, read_video_frames
from xmr.datasets.pairs import CaptionPairDataset
from xmr.datasets.retrieval import RetrievalDataset
from xmr.datasets.transforms import MediaTransform

__all__ = [
    'Annotation', 'AnnotationError', 'MediaRecord', 'dump_annotation', 'load_annotation',
    'MediaCaptionDataset', 'CaptionPairDataset', 'RetrievalDataset', 'retrieval_collate',
    'MediaSkippedWarning', 'SkippedMedia', 'MediaReadError', 'read_image', 'read_video_frames',
    'uniform_frame_indices', 'MediaTransform',
    'synthetic',
]
