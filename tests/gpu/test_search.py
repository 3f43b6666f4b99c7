"""A gallery searched by a model's token score on the accelerator finds the CPU's hits."""
from __future__ import annotations

import pytest
import torch

from tests.apis.conftest import random_images
from tests.apis.test_dual_encoder import QUERIES, TINY, dual_encoder_cfg
from tests.gpu.conftest import FP32_TOLERANCE
from xmr.apis import MediaIndex
from xmr.registry import MODELS

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize('candidates', [None, 3])
def test_a_token_gallery_searched_on_the_accelerator_finds_the_cpu_s_hits(accelerator, tmp_path,
                                                                        candidates):
    torch.manual_seed(0)
    model = MODELS.build(dual_encoder_cfg(retrieval_score='patch_word')).eval()
    files = random_images(tmp_path, ('beach', 'forest', 'city', 'desert', 'lake', 'field'))
    searched = {}
    for device in (torch.device('cpu'), accelerator):
        model.to(device)
        index = MediaIndex.from_media(model, files, transform=TINY)
        searched[device.type] = (index, index.search(model, QUERIES['en'], 'en', k=4,
                                                     candidates=candidates))
    (cpu_index, expected), (index, hits) = searched['cpu'], searched[accelerator.type]
    torch.testing.assert_close(index.tokens.tokens, cpu_index.tokens.tokens, **FP32_TOLERANCE)
    for row, want in zip(hits, expected):
        assert [hit.media_id for hit in row] == [hit.media_id for hit in want]
        torch.testing.assert_close(torch.tensor([hit.score for hit in row]),
                                   torch.tensor([hit.score for hit in want]), **FP32_TOLERANCE)
