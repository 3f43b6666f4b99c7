"""masked_token_mean against means computed by hand."""
from __future__ import annotations

import torch

from xmr.models.pooling import masked_token_mean


def test_padding_is_left_out_and_an_empty_sample_gives_zeros():
    tokens = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]],
                           [[5.0, 7.0], [9.0, 9.0], [9.0, 9.0]]])
    mask = torch.tensor([[True, True, False], [False, False, False]])
    torch.testing.assert_close(masked_token_mean(tokens, mask),
                               torch.tensor([[2.0, 3.0], [0.0, 0.0]]))


def test_under_cpu_autocast_a_count_past_256_scales_the_mean_but_keeps_its_direction():
    """CPU autocast rounds the mean and its count to bf16 (257 -> 256): the mean is 257/256 of
    the exact one (docs/benchmarks.md), and CDDS reads it only by its cosine."""
    tokens = (torch.randn(3, 257, 64, generator=torch.Generator().manual_seed(0)) + 0.5)
    tokens = tokens.bfloat16()
    mask = torch.ones(3, 257, dtype=torch.bool)
    exact = tokens.double().mean(1)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        pooled = masked_token_mean(tokens, mask)
    ratio = (pooled.double() / exact).median()
    torch.testing.assert_close(ratio, torch.tensor(257 / 256, dtype=torch.float64), rtol=1e-3,
                               atol=0)
    cosine = torch.nn.functional.cosine_similarity(pooled.double(), exact, dim=-1)
    assert (1 - cosine).max() < 1e-5
