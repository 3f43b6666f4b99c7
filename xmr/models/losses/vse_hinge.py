"""VSE++'s hinge-based triplet ranking loss between two batches of paired embeddings."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from xmr.models.losses.pair import PairLoss
from xmr.registry import MODELS


@MODELS.register_module()
class VSEHingeLoss(PairLoss):
    """``L = Σ_i Σ_{j≠i} [α − s(i, i) + s(i, j)]₊ + Σ_j Σ_{i≠j} [α − s(j, j) + s(i, j)]₊``, with
    ``s(i, j) = cos(a_i, b_j)``: every image against the batch's other captions, and every
    caption against the other images (VSE++, Faghri et al. 2018, Eq. 4; LAPS's objective).

    Its hardest-negative form (VSE++'s ``MH``) keeps each query's largest violation alone,
    ``max_{j≠i}`` in place of ``Σ_{j≠i}``. LAPS sums over the negatives for its first epoch and
    takes the hardest after it (``hardest_after``: that epoch's iterations); the loss counts
    its own training calls (a buffer, saved with checkpoints), and the choice is made on the
    device, so a step never waits to read the count.

    Args:
        margin: ``α``, 0.2 in VSE++ and LAPS.
        hardest_after: training calls that sum over the negatives before the hardest negative
            alone counts; 0 takes the hardest from the first call (VSE++), ``None`` always sums
            (VSE++'s ``VSE0``).
    """

    batch_contrastive = True

    def __init__(self, margin: float = 0.2, hardest_after: int | None = 0) -> None:
        super().__init__()
        if margin < 0:
            raise ValueError(f'VSEHingeLoss margin must be >= 0, got {margin}')
        if hardest_after is not None and hardest_after < 0:
            raise ValueError(f'VSEHingeLoss hardest_after must be >= 0 training calls or None '
                             f'(always sum), got {hardest_after}')
        self.margin, self.hardest_after = margin, hardest_after
        self.register_buffer('calls', torch.zeros((), dtype=torch.long))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``[B, E]`` images and ``[B, E]`` captions, row i of each a pair -> scalar."""
        scores = F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).t()  # [B, B], s(image, caption)
        positive = scores.diagonal()
        negative = ~torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device)
        to_captions = ((self.margin - positive[:, None] + scores).clamp(min=0) * negative)
        to_images = ((self.margin - positive[None, :] + scores).clamp(min=0) * negative)
        summed = to_captions.sum() + to_images.sum()
        if self.hardest_after is None:
            return summed
        hardest = to_captions.amax(dim=1).sum() + to_images.amax(dim=0).sum()
        loss = torch.where(self.calls >= self.hardest_after, hardest, summed)
        if self.training:
            self.calls += 1
        return loss
