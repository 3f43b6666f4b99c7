"""Fixtures of the xmr.apis tests: a tiny retriever, and random images written as files."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.conftest import tiny_retriever_cfg
from xmr.registry import MODELS


@pytest.fixture(scope='module')
def model():
    torch.manual_seed(0)
    return MODELS.build(tiny_retriever_cfg()).eval()


def random_images(folder: Path, names: Sequence[str]) -> list[Path]:
    """``<name>.png`` files of random 36 x 44 pixels in ``folder``, seeded."""
    rng = np.random.default_rng(0)
    paths = []
    for name in names:
        paths.append(folder / f'{name}.png')
        Image.fromarray(rng.integers(0, 256, (36, 44, 3), dtype=np.uint8)).save(paths[-1])
    return paths
