"""Symmetric InfoNCE between two batches of paired embeddings."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.losses.pair import PairLoss
from xmr.registry import MODELS


@MODELS.register_module()
class InfoNCELoss(PairLoss):
    """``L = (CE(S, I) + CE(Sᵀ, I)) / 2`` with ``S = <a_i, b_j> / τ`` on L2-normalised inputs.

    DASD's ``L_CM`` between ``r^T`` and ``r^V``, τ = 0.01 (logit scale 100, fixed).

    Args:
        temperature: τ; with ``learnable=True`` it is the initial value of a trained log-scale.
        learnable: train ``log(1/τ)`` (CLIP pre-training) instead of fixing it.
        max_scale: clamp of the learnable logit scale (CLIP's 100).
    """

    batch_contrastive = True

    def __init__(self, temperature: float = 0.01, learnable: bool = False,
                 max_scale: float = 100.0) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f'temperature must be positive, got {temperature}')
        log_scale = torch.tensor(math.log(1.0 / temperature))
        if learnable:
            self.log_scale = nn.Parameter(log_scale)
        else:
            self.register_buffer('log_scale', log_scale, persistent=False)
        self.max_log_scale = math.log(max_scale)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``[B, E]`` pairs (row i of ``a`` matches row i of ``b``) -> scalar."""
        a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
        scale = self.log_scale.clamp(max=self.max_log_scale).exp()
        logits = scale * a @ b.t()
        labels = torch.arange(a.shape[0], device=a.device)
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
