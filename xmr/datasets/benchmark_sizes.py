"""The media counts of the benchmarks' evaluation splits, as the papers score them.

A split of a named benchmark with another count (a truncated download, a converter run on part of
a release, an annotation file cut by hand) gives figures that no paper's are comparable with,
and nothing in the figures says so: a recall on 999 videos reads like one on 1,000.
"""
from __future__ import annotations

import os

from xmr.datasets.annotation import Annotation

__all__ = ['BENCHMARK_SPLIT_SIZES', 'check_split_size', 'split_size_mismatch']

#: ``(dataset, split)`` of an xmr annotation (the names its converter writes) -> the image or
#: video count the benchmark's evaluation is defined on (../shared/REFERENCE.md).
BENCHMARK_SPLIT_SIZES: dict[tuple[str, str], int] = {
    # Multi-MSRVTT's 1k-A (JSFusion) test: 1,000 clips.
    ('msrvtt', 'test1ka'): 1000,
    # Karpathy's COCO splits: 5,000 val, 5,000 test, and the 1K protocol's five folds of it.
    ('mscoco', 'val'): 5000,
    ('mscoco', 'test5k'): 5000,
    **{('mscoco', f'test1k_fold{fold}'): 1000 for fold in range(5)},
    # Karpathy's Flickr30K splits (29,000 / 1,014 / 1,000): the evaluated ones.
    ('flickr30k', 'val'): 1014,
    ('flickr30k', 'test'): 1000,
    # Multi30K: task 1 val and test_2016_flickr, and task 2's on the same images.
    ('multi30k', 'val'): 1014,
    ('multi30k', 'test'): 1000,
    ('multi30k', 'val_5captions'): 1014,
    ('multi30k', 'test_5captions'): 1000,
    # XTD10: 1,000 COCO-2014 images.
    ('xtd10', 'test'): 1000,
    ('crossmodal3600', 'test'): 3600,
}


def split_size_mismatch(ann: Annotation) -> int | None:
    """The media count :data:`BENCHMARK_SPLIT_SIZES` expects of ``ann``'s dataset and split
    where ``ann`` holds another; ``None`` where it matches or the split is no benchmark's
    (few-shot parts, train splits, a dataset of one's own). Shared by the datasets'
    :func:`check_split_size` and the converters' check at conversion time."""
    expected = BENCHMARK_SPLIT_SIZES.get((ann.dataset, ann.split))
    return None if expected is None or len(ann.items) == expected else expected


def check_split_size(ann: Annotation, ann_file: str | os.PathLike) -> None:
    """Refuse an evaluation split of a benchmark in :data:`BENCHMARK_SPLIT_SIZES` whose media
    count differs from the benchmark's; other splits (few-shot parts, a dataset of one's own)
    pass.

    Raises:
        ValueError: naming the file, the dataset and split, the count found and the one
            expected, and the opt-out.
    """
    expected = split_size_mismatch(ann)
    if expected is None:
        return
    raise ValueError(
        f'{ann_file}: {ann.dataset} {ann.split} holds {len(ann.items)} media, but the '
        f'benchmark is scored on {expected}, so its figures would not be comparable with '
        "published ones: a short file is likely a broken download or conversion, so convert "
        "the whole release again (docs/data.md, Converters); a deliberate subset is read with "
        'check_benchmark_size=False (better: give it a split name of its own)')
