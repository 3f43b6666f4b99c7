"""Bundled synthetic multilingual image–caption data, drawn on the fly (see docs/data_synthetic.md).

Importing this package registers ``SyntheticPairDataset`` and ``SyntheticRetrievalDataset`` in
``DATASETS`` and ``synthetic_caption_corpus`` in ``FUNCTIONS``.
"""
from xmr.datasets.synthetic.captions import (
    CAPTION_LANGUAGES,
    CAPTION_STYLES,
    CaptionGrammar,
    caption_scene,
)
from xmr.datasets.synthetic.dataset import (
    SyntheticPairDataset,
    SyntheticRetrievalDataset,
    synthetic_caption_corpus,
)
from xmr.datasets.synthetic.scenes import (
    COLOURS,
    COUNTS,
    PALETTE,
    POSITIONS,
    SHAPES,
    SIZES,
    ObjectGroup,
    Scene,
    object_centres,
    render_scene,
    sample_scene,
    scene_at,
    scene_split,
    split_sizes,
)

__all__ = [
    'CAPTION_LANGUAGES', 'CAPTION_STYLES', 'COLOURS', 'COUNTS', 'CaptionGrammar', 'ObjectGroup',
    'PALETTE', 'POSITIONS', 'SHAPES', 'SIZES', 'Scene', 'SyntheticPairDataset',
    'SyntheticRetrievalDataset', 'caption_scene', 'object_centres', 'render_scene',
    'sample_scene', 'scene_at', 'scene_split', 'split_sizes', 'synthetic_caption_corpus',
]
