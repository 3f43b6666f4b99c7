"""The contract of a loss between two paired batches of embeddings."""
from __future__ import annotations

from abc import ABCMeta, abstractmethod
from typing import Any

import torch
from torch import nn


class PairLoss(nn.Module, metaclass=ABCMeta):
    """``loss(a, b)``: ``[B, E]`` embeddings whose row ``i`` pairs with row ``i`` -> scalar.

    Attributes:
        batch_contrastive: the batch's other rows are the negatives of each pair, so under DDP
            the retrievers hand the loss the global batch (``gather_with_grad``); a pointwise
            distance sees this rank's rows only.
        reads_backbone: the loss can score pairs as the backbone does, so the retrievers build
            it with their backbone as ``backbone=`` (:class:`~xmr.models.losses.SigmoidLoss`,
            :class:`~xmr.models.losses.InfoNCELoss` with ``temperature=None``).
        mask_same_media: a batch-contrastive loss built with ``mask_same_media=True``: the
            retrievers pass it ``same_media`` (bool ``[B, B]``, ``True`` where row ``i`` of
            ``a`` and row ``j`` of ``b`` come from one medium, the diagonal included), and pairs
            of one medium off the diagonal (another caption of the query's image) are no
            negatives, as LAPS trains (its ``mask_repeat``).
        given_by_builder: arguments the retrievers pass, which a config may not give: the
            config's load refuses them. A class that ``reads_backbone`` has ``backbone`` among
            them without saying so.
    """

    batch_contrastive: bool = False
    reads_backbone: bool = False
    mask_same_media: bool = False
    given_by_builder: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.reads_backbone and 'backbone' not in cls.given_by_builder:
            cls.given_by_builder = (*cls.given_by_builder, 'backbone')

    @abstractmethod
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``[B, E]``, ``[B, E]`` -> scalar."""


def false_negatives(same_media: torch.Tensor | None) -> torch.Tensor | None:
    """``[B, B]`` bool: the pairs of one medium off the diagonal, which a loss built with
    ``mask_same_media`` leaves out of its negatives; ``None`` for ``None`` (nothing masked)."""
    if same_media is None:
        return None
    return same_media & ~torch.eye(same_media.shape[0], dtype=torch.bool,
                                   device=same_media.device)
