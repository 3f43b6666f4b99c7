"""Masked mean pooling of token sequences, the one implementation every module uses."""
from __future__ import annotations

import torch


def masked_token_mean(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of the real tokens of each sample: ``[B, N, D]``, mask ``[B, N]`` -> ``[B, D]``.

    A sample without a real token gives zeros (its count is clamped to 1) rather than NaN.
    """
    weights = mask.to(tokens.dtype).unsqueeze(-1)
    return (tokens * weights).sum(1) / weights.sum(1).clamp(min=1.0)
