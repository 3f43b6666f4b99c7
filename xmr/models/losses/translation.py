"""Translation-based alignment of PECTVLM: pull a caption's embedding onto its translation's."""
from __future__ import annotations

import torch

from xmr.models.losses.alignment import AlignmentLoss
from xmr.models.losses.contrastive import InfoNCELoss
from xmr.models.losses.pair import PairLoss
from xmr.registry import MODELS

ALIGNMENT_KINDS = ('mse', 'contrastive')


@MODELS.register_module()
class TranslationAlignmentLoss(PairLoss):
    """``align(r_q, r_t)`` between a batch of caption embeddings and their translations'.

    PECTVLM adds ``λ · align`` to the image–text contrastive loss (its ``text_loss_ratio``):

    * ``mse``: ``mean((r_q − r_t)²)`` over elements, on the unnormalised embeddings;
    * ``contrastive``: symmetric InfoNCE between the L2-normalised embeddings with a fixed
      logit scale (``1 / temperature``, 100 in PECTVLM): caption ``i`` and translation ``i`` are
      the positive pair, the batch's other translations the negatives.

    Args:
        kind: ``mse`` or ``contrastive``.
        temperature: τ of the contrastive kind.
    """

    def __init__(self, kind: str = 'mse', temperature: float = 0.01) -> None:
        super().__init__()
        if kind not in ALIGNMENT_KINDS:
            raise ValueError(f"translation alignment kind '{kind}' is not one of "
                             f'{ALIGNMENT_KINDS}')
        if temperature <= 0:
            raise ValueError(f'temperature must be positive, got {temperature}')
        self.kind = kind
        self.batch_contrastive = kind == 'contrastive'
        # The scale is fixed at 1/τ: InfoNCELoss's max_scale, the clamp of a learnt scale,
        # must not refuse a τ below 0.01 that this loss gives no way to allow.
        self.distance = (AlignmentLoss(kind='mse', reduction='mean') if kind == 'mse'
                         else InfoNCELoss(temperature=temperature, max_scale=1.0 / temperature))

    def forward(self, query: torch.Tensor, translation: torch.Tensor) -> torch.Tensor:
        """``[B, E]`` embeddings and ``[B, E]`` embeddings of their translations -> scalar."""
        if query.shape != translation.shape:
            raise ValueError(f'translation alignment needs paired batches, got '
                             f'{tuple(query.shape)} and {tuple(translation.shape)}')
        return self.distance(query, translation)
