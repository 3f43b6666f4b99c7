"""The contract of a loss between two paired batches of embeddings."""
from __future__ import annotations

from abc import ABCMeta, abstractmethod

import torch
from torch import nn


class PairLoss(nn.Module, metaclass=ABCMeta):
    """``loss(a, b)``: ``[B, E]`` embeddings whose row ``i`` pairs with row ``i`` -> scalar.

    Attributes:
        batch_contrastive: the batch's other rows are the negatives of each pair, so under DDP
            the retrievers hand the loss the global batch (``gather_with_grad``); a pointwise
            distance sees this rank's rows only.
        reads_backbone: the loss scores pairs as the backbone does, so the retrievers build it
            with their backbone as ``backbone=`` (:class:`~xmr.models.losses.SigmoidLoss`).
    """

    batch_contrastive: bool = False
    reads_backbone: bool = False

    @abstractmethod
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``[B, E]``, ``[B, E]`` -> scalar."""
