"""Batch-coupled losses under DDP: gather the embeddings of every rank, with gradients.

InfoNCE compares each caption with every medium of the batch, so a rank that sees only its
shard of the batch would train on fewer negatives than the configured global batch (DASD's 128).
Gathering the embeddings makes each rank compute the loss of the global batch; the backward pass
sums the gradients of the gathered copies across ranks, and DDP's averaging then gives exactly
the single-process gradient of that global batch.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ['gather_with_grad']


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class _GatherRows(torch.autograd.Function):
    """``[B_r, E]`` on each rank -> ``[sum B_r, E]`` on every rank (rank order)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        world = dist.get_world_size()
        rows = torch.tensor([tensor.shape[0]], device=tensor.device)
        all_rows = [torch.zeros_like(rows) for _ in range(world)]
        dist.all_gather(all_rows, rows)
        sizes = [int(r) for r in all_rows]
        # all_gather needs equal shapes: pad to the largest shard, trim afterwards.
        padded = tensor.new_zeros((max(sizes), *tensor.shape[1:]))
        padded[:tensor.shape[0]] = tensor
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded.contiguous())
        rank = dist.get_rank()
        ctx.offset, ctx.rows = sum(sizes[:rank]), sizes[rank]
        return torch.cat([part[:size] for part, size in zip(parts, sizes)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        # Every rank computed the same global loss: the gradient of this rank's rows is the sum
        # over ranks of the gradients that reached them.
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad[ctx.offset:ctx.offset + ctx.rows]


def gather_with_grad(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Concatenate each ``[B_r, E]`` tensor over the DDP ranks, keeping gradients.

    Returns the tensors unchanged outside distributed runs (or with one process).
    """
    if not _distributed():
        return tensors
    return tuple(_GatherRows.apply(t) if t.requires_grad else _GatherRows.apply(t).detach()
                 for t in tensors)
