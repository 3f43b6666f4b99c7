"""Symmetric InfoNCE between two batches of paired embeddings."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.losses.pair import PairLoss, false_negatives
from xmr.models.losses.precision import in_fp32
from xmr.models.unowned import hold_unowned
from xmr.registry import MODELS


@in_fp32
def symmetric_cross_entropy(logits: torch.Tensor,
                            masked: torch.Tensor | None = None) -> torch.Tensor:
    """``(CE(S, I) + CE(Sᵀ, I)) / 2`` over ``[B, B]`` logits whose diagonal holds the positive
    pairs, in fp32 (:func:`~xmr.models.losses.precision.in_fp32`); ``masked`` (bool ``[B, B]``)
    pairs are left out of both softmaxes."""
    if masked is not None:
        logits = logits.masked_fill(masked, float('-inf'))
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


@MODELS.register_module()
class InfoNCELoss(PairLoss):
    """``L = (CE(S, I) + CE(Sᵀ, I)) / 2`` with ``S = <a_i, b_j> / τ`` on L2-normalised inputs.

    DASD's ``L_CM`` between ``r^T`` and ``r^V``, τ = 0.01 (logit scale 100, fixed).

    Args:
        temperature: τ; with ``learnable=True`` it is the initial value of a trained log-scale.
            ``None``: the backbone's own learnt scale (its :meth:`pair_logits`, read at every
            call, never trained here, not clamped), e.g. the ``temp`` a CCLM checkpoint holds.
        learnable: train ``log(1/τ)`` (CLIP pre-training) instead of fixing it.
        max_scale: clamp of the logit scale (CLIP's 100); ``1/temperature`` may not exceed it.
            A learnt scale is clamped in place at each call, so that it trains on from the cap.
        mask_same_media: leave the other captions of a query's medium out of its softmax
            (``same_media``, :class:`PairLoss`); ``False`` counts them as negatives (CLIP).
        backbone: the backbone whose scale ``temperature=None`` reads (the retrievers pass
            their own; it is held, not owned); unused when a temperature is given.
    """

    batch_contrastive = True
    reads_backbone = True

    def __init__(self, temperature: float | None = 0.01, learnable: bool = False,
                 max_scale: float = 100.0, mask_same_media: bool = False,
                 backbone: nn.Module | None = None) -> None:
        super().__init__()
        self.mask_same_media = mask_same_media
        self.backbone = None
        if temperature is None:
            if learnable:
                raise ValueError('InfoNCELoss(learnable=True) starts from a temperature: give '
                                 'one (temperature=None reads the backbone\'s fixed scale)')
            if backbone is None:
                raise ValueError("InfoNCELoss(temperature=None) reads the backbone's temperature: "
                                 'give a temperature or build it inside a retriever')
            hold_unowned(self, 'backbone', backbone)
            return
        if temperature <= 0:
            raise ValueError(f'temperature must be positive, got {temperature}')
        self._check_scale(temperature, max_scale)
        log_scale = torch.tensor(math.log(1.0 / temperature))
        if learnable:
            self.log_scale = nn.Parameter(log_scale)
        else:
            self.register_buffer('log_scale', log_scale, persistent=False)
        self.max_log_scale = math.log(max_scale)

    @staticmethod
    def _check_scale(temperature: float, max_scale: float) -> None:
        """Refuse a ``1/τ`` above ``max_scale``, which the clamp would turn into ``max_scale``
        silently (a fixed τ = 0.005 ran at τ = 0.01); a relative 1e-6 spares τ = 1/max_scale."""
        if 1.0 / temperature > max_scale * (1 + 1e-6):
            raise ValueError(
                f'temperature {temperature} gives a logit scale of {1.0 / temperature:g}, above '
                f'max_scale={max_scale:g}, which clamps it to {max_scale:g}: set '
                f'max_scale={1.0 / temperature:g} (or more), or a temperature of at least '
                f'{1.0 / max_scale:g}')

    def forward(self, a: torch.Tensor, b: torch.Tensor,
                same_media: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, E]`` pairs (row i of ``a`` matches row i of ``b``), optionally ``same_media``
        ``[B, B]`` -> scalar."""
        a, b = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
        if self.backbone is not None:
            scale = self.backbone.pair_logits()[0].detach()
        else:
            if isinstance(self.log_scale, nn.Parameter):
                # In place, as CLIP and CCLM clamp theirs: a clamp in the graph would give the
                # scale no gradient once a step took it past the cap, and hold it there for good.
                with torch.no_grad():
                    self.log_scale.clamp_(max=self.max_log_scale)
            scale = self.log_scale.exp()
        # The product in the autocast dtype, the softmaxes in fp32 (as on CUDA).
        return symmetric_cross_entropy(scale * a @ b.t(), false_negatives(same_media))
