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
