"""VSE++'s hinge-based triplet ranking loss between two batches of paired embeddings."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from xmr.models.losses.pair import PairLoss, false_negatives
from xmr.models.losses.precision import in_fp32
from xmr.registry import MODELS


@MODELS.register_module()
class VSEHingeLoss(PairLoss):
    """``L = Σ_i Σ_{j≠i} [α − s(i, i) + s(i, j)]₊ + Σ_j Σ_{i≠j} [α − s(j, j) + s(i, j)]₊``, with
    ``s(i, j) = cos(a_i, b_j)``: every image against the batch's other captions, and every
    caption against the other images (VSE++, Faghri et al. 2018, Eq. 4; LAPS's objective).

    Its hardest-negative form (VSE++'s ``MH``) keeps each query's largest violation alone,
    ``max_{j≠i}`` in place of ``Σ_{j≠i}``. LAPS sums over the negatives for its first epoch and
    takes the hardest after it (``hardest_after_pairs``: the training set's pairs). The loss
    counts the pairs it has trained on (a buffer, saved with checkpoints) and sums while a call's
    batch lies within the first pass: a pass of ``N`` pairs at batch ``B`` yields ``⌊N/B⌋`` full
    batches (an incomplete last one dropped) or ``⌈N/B⌉`` (kept), and either way the first call
    whose count plus its batch exceeds ``N`` opens the second pass, so the switch follows the
    batch size the run trains at, not the one a config was written for. Under DDP it sees the
    global batch, so every rank counts one pass over the data alike, whatever the number of
    processes and the batch per process. The choice is made on the device, so a step never
    waits to read the count.

    Args:
        margin: ``α``, 0.2 in VSE++ and LAPS.
        hardest_after_pairs: training pairs summed over the negatives before the hardest
            negative alone counts, one pass's for LAPS (the dataset's size): a call sums while
            the pairs seen before it plus its own are no more; 0 takes the hardest from the
            first call (VSE++), ``None`` always sums (VSE++'s ``VSE0``).
        mask_same_media: the other captions of a query's image are no negatives of it
            (``same_media``, :class:`PairLoss`), as LAPS masks them; ``False`` counts them
            (VSE++).
    """

    batch_contrastive = True

    def __init__(self, margin: float = 0.2, hardest_after_pairs: int | None = 0,
                 mask_same_media: bool = False) -> None:
        super().__init__()
        self.mask_same_media = mask_same_media
        if margin < 0:
            raise ValueError(f'VSEHingeLoss margin must be >= 0, got {margin}')
        if hardest_after_pairs is not None and hardest_after_pairs < 0:
            raise ValueError(f'VSEHingeLoss hardest_after_pairs must be >= 0 training pairs or '
                             f'None (always sum), got {hardest_after_pairs}')
        self.margin, self.hardest_after_pairs = margin, hardest_after_pairs
        self.register_buffer('pairs_seen', torch.zeros((), dtype=torch.long))

    def forward(self, a: torch.Tensor, b: torch.Tensor,
                same_media: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, E]`` images and ``[B, E]`` captions, row i of each a pair, optionally
        ``same_media`` ``[B, B]`` -> scalar."""
        # The product in the autocast dtype, the violations and their sums in fp32.
        scores = F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).t()  # [B, B], s(image, caption)
        summed, hardest = hinge_violations(scores, self.margin, false_negatives(same_media))
        if self.hardest_after_pairs is None:
            return summed
        batch = scores.shape[0]
        loss = torch.where(self.pairs_seen + batch > self.hardest_after_pairs, hardest, summed)
        if self.training:
            self.pairs_seen += batch
        return loss


@in_fp32
def hinge_violations(scores: torch.Tensor, margin: float,
                     masked: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """VSE++'s Eq. 4 summed over the negatives and its hardest-negative form, from ``[B, B]``
    cosines ``s(image i, caption j)``, in fp32 (:func:`~xmr.models.losses.precision.in_fp32`);
    ``masked`` (bool ``[B, B]``) pairs are no negatives.

    Returns:
        ``(summed, hardest)`` scalars.
    """
    positive = scores.diagonal()
    negative = ~torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device)
    if masked is not None:
        negative = negative & ~masked
    to_captions = (margin - positive[:, None] + scores).clamp(min=0) * negative
    to_images = (margin - positive[None, :] + scores).clamp(min=0) * negative
    return (to_captions.sum() + to_images.sum(),
            to_captions.amax(dim=1).sum() + to_images.amax(dim=0).sum())
