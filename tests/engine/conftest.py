"""Fixtures of the engine's tests."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from xmr.datasets import Annotation, MediaRecord, dump_annotation


@pytest.fixture
def pair_ann_file(tmp_path):
    ann = Annotation(
        dataset='demo', split='train', media_type='image', languages=['en'],
        source_lang='en', translation_langs=['de'],
        items=[MediaRecord(name, f'{name}.png', {'en': [f'a {name} dog', f'the {name} cat']},
                           {'de': [f'ein {name} Hund', f'die {name} Katze']})
               for name in ('red', 'blue')])
    rng = np.random.default_rng(0)
    for name in ('red', 'blue'):
        Image.fromarray(rng.integers(0, 255, (40, 36, 3), dtype=np.uint8)).save(
            tmp_path / f'{name}.png')
    dump_annotation(ann, tmp_path / 'ann.json')
    return tmp_path / 'ann.json'
