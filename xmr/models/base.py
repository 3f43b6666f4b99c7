"""The base of xmr's models: MMEngine's ``BaseModel`` with losses logged as DDP's mean."""
from __future__ import annotations

import torch
from mmengine import dist
from mmengine.model import BaseModel

__all__ = ['RankMeanLogModel']


class RankMeanLogModel(BaseModel):
    """MMEngine's ``BaseModel`` whose logged losses are averaged over the DDP ranks."""

    def parse_losses(self, losses: dict[str, torch.Tensor]
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """MMEngine's total loss, with the logged values averaged over the DDP ranks.

        Each rank's losses are of its own shard of the batch; the averaged gradients optimise
        their mean, so that mean is what the log shows (rank 0's shard alone is noisier and,
        for batch-contrastive losses such as ``L_CL``, a different quantity). The returned loss
        stays this rank's: backward needs its graph.
        """
        loss, log_vars = super().parse_losses(losses)
        values = torch.stack([value.detach().float() for value in log_vars.values()])
        dist.all_reduce(values, op='mean')
        return loss, dict(zip(log_vars, values))
