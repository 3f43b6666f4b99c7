"""SigLIP's pairwise sigmoid loss, with the backbone's own scale and bias or given ones."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from xmr.models.losses.pair import PairLoss, false_negatives
from xmr.models.losses.precision import in_fp32
from xmr.models.unowned import hold_unowned
from xmr.registry import MODELS


@MODELS.register_module()
class SigmoidLoss(PairLoss):
    """``L = -(1/B) Σ_i Σ_j log σ(z_ij (t · <â_i, b̂_j> + b))``, ``z_ij = 1`` if ``i = j`` else -1.

    SigLIP's pretraining objective (Zhai et al., 2023): every pair of the batch is a binary
    decision, so no softmax over the batch. By default ``t`` and ``b`` are the backbone's own
    learnt values, read from it at every call and never trained here (the towers stay as they
    were pretrained, so the target branch learns to produce what they score); given values fix
    them instead.

    Args:
        logit_scale: ``t`` itself (SigLIP's ``exp(t')``), or ``None`` for the backbone's.
        logit_bias: ``b``, or ``None`` for the backbone's.
        backbone: the backbone whose :meth:`pair_logits` fill what is ``None`` (the retrievers
            pass their own; it is held, not owned).
        mask_same_media: leave the pairs of a query with the other captions of its medium out
            of the sum (``same_media``, :class:`PairLoss`); ``False`` scores them as
            mismatches (SigLIP).
    """

    batch_contrastive = True
    reads_backbone = True

    def __init__(self, logit_scale: float | None = None, logit_bias: float | None = None,
                 backbone: torch.nn.Module | None = None, mask_same_media: bool = False) -> None:
        super().__init__()
        self.mask_same_media = mask_same_media
        if (logit_scale is None or logit_bias is None) and backbone is None:
            raise ValueError('SigmoidLoss reads the logit scale and bias it is not given from '
                             'the backbone; give both or build it inside a retriever')
        self.logit_scale, self.logit_bias = logit_scale, logit_bias
        if backbone is not None:
            hold_unowned(self, 'backbone', backbone)

    def scale_and_bias(self) -> tuple[torch.Tensor | float, torch.Tensor | float]:
        """``(t, b)``: the given values, the rest from the backbone (detached: frozen).

        Raises:
            ValueError: a backbone that learnt no bias (trained with InfoNCE) and none given.
        """
        scale, bias = self.logit_scale, self.logit_bias
        if scale is None or bias is None:
            own_scale, own_bias = self.backbone.pair_logits()
            scale = own_scale.detach() if scale is None else scale
            if bias is None:
                if own_bias is None:
                    raise ValueError(f'{type(self.backbone).__name__} learnt no logit bias (it '
                                     'was not trained with a sigmoid loss); give SigmoidLoss a '
                                     'logit_bias (SigLIP starts from -10)')
                bias = own_bias.detach()
        return scale, bias

    def forward(self, a: torch.Tensor, b: torch.Tensor,
                same_media: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, E]`` pairs (row ``i`` of ``a`` matches row ``i`` of ``b``), optionally
        ``same_media`` ``[B, B]`` -> scalar."""
        scale, bias = self.scale_and_bias()
        # The product in the autocast dtype, the log-likelihoods and their sum in fp32.
        scaled = scale * F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).t()
        return pairwise_sigmoid_loss(scaled, bias, false_negatives(same_media))


@in_fp32
def pairwise_sigmoid_loss(scaled: torch.Tensor, bias: torch.Tensor | float,
                          masked: torch.Tensor | None = None) -> torch.Tensor:
    """``-(1/B) Σ_ij log σ(z_ij (S_ij + b))`` from ``[B, B]`` scaled cosines ``S = t·<â, b̂>``, in
    fp32 (:func:`~xmr.models.losses.precision.in_fp32`); ``masked`` (bool ``[B, B]``) pairs are
    left out of the sum."""
    logits = scaled + bias
    signs = 2 * torch.eye(logits.shape[0], device=logits.device, dtype=logits.dtype) - 1
    log_likelihoods = F.logsigmoid(signs * logits)
    if masked is not None:
        log_likelihoods = log_likelihoods.masked_fill(masked, 0.0)
    return -log_likelihoods.sum() / logits.shape[0]
