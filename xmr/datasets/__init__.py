"""Datasets, annotation loaders and batch assembly.

Item contract (every dataset of xmr):

* training pairs: ``dict(media=uint8 Tensor [3, H, W] or [T, 3, H, W], media_id=str,
  source_text=str, target_text=str | None, lang=str, index=int)``;
* retrieval evaluation: ``dict(media=..., media_id=str, captions={lang: [str, ...]}, index=int)``.

Media arrive resized and cropped to the backbone's resolution as uint8; the model's data
preprocessor normalises them.
"""
from xmr.datasets.collate import retrieval_collate

__all__ = ['retrieval_collate']
