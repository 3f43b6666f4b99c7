"""Cross-lingual alignment: pull target embeddings onto the frozen source embeddings."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from xmr.models.losses.pair import PairLoss
from xmr.models.losses.precision import in_fp32
from xmr.registry import MODELS


@MODELS.register_module()
class AlignmentLoss(PairLoss):
    """Distance between ``r^T`` and ``r^S`` (DASD ``L_CL``, MLA's NLT stage).

    Args:
        kind: ``'mse'`` (``L_CL = ||r^S - r^T||²``, DASD), ``'l1'`` or ``'smooth_l1'``.
        reduction: ``'mean'`` averages over elements (the authors' ``F.mse_loss``); ``'sum'``
            sums over the embedding dimensions and averages over the batch (the paper's norm).
        normalize: compare L2-normalised embeddings instead of raw ones.
    """

    kinds = ('mse', 'l1', 'smooth_l1')

    def __init__(self, kind: str = 'mse', reduction: str = 'mean',
                 normalize: bool = False) -> None:
        super().__init__()
        if kind not in self.kinds:
            raise ValueError(f"alignment loss kind '{kind}' is not one of {self.kinds}")
        if reduction not in ('mean', 'sum'):
            raise ValueError(f"reduction '{reduction}' is not 'mean' or 'sum'")
        self.kind, self.reduction, self.normalize = kind, reduction, normalize

    @in_fp32
    def forward(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``[B, E]``, ``[B, E]`` -> scalar, in fp32 under autocast (no product to keep in its
        dtype; CPU autocast ran the normalisation in bf16)."""
        if self.normalize:
            prediction, target = F.normalize(prediction, dim=-1), F.normalize(target, dim=-1)
        fn = {'mse': F.mse_loss, 'l1': F.l1_loss, 'smooth_l1': F.smooth_l1_loss}[self.kind]
        per_element = fn(prediction, target, reduction='none')
        if self.reduction == 'mean':
            return per_element.mean()
        return per_element.sum(-1).mean()
