"""Batch-coupled losses under DDP: gather the embeddings of every rank, with gradients.

InfoNCE compares each caption with every medium of the batch, so a rank that sees only its
shard of the batch would train on fewer negatives than the configured global batch (DASD's 128).
Gathering the embeddings makes each rank compute the loss of the global batch; each rank's own
rows then carry the whole gradient of that loss, scaled by the number of ranks, and DDP's
averaging gives exactly the single-process gradient of the global batch.
"""
from __future__ import annotations

import functools
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ['gather_with_grad']


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def host_group() -> dist.ProcessGroup | None:
    """A group of every rank whose collectives take tensors on the host: ``None`` (the default
    group) when that one has a gloo backend, else a gloo group beside it.

    The gloo group is made at the first call, by every rank (the ranks reach their first
    gather together), and kept for as long as the default group lives.
    """
    return None if 'gloo' in dist.get_backend() else gloo_group_beside(dist.group.WORLD)


@functools.cache
def gloo_group_beside(world: dist.ProcessGroup, timeout: timedelta | None = None
                      ) -> dist.ProcessGroup:
    """A gloo group of every rank of ``world`` (the default group), its collectives given up
    after ``timeout`` (``None``: torch's default). Made at the first call with these
    arguments, by every rank together, and kept for as long as ``world`` lives."""
    return dist.new_group(backend='gloo', timeout=timeout)


@torch.compiler.disable
def shard_rows(tensors: tuple[torch.Tensor, ...]) -> list[list[int]]:
    """The rows of each of ``tensors`` on every rank: ``[rank][tensor]``, in one collective.

    The counts are shapes, known to the host, and are exchanged there (:func:`host_group`):
    under NCCL a count sent through the device would wait for every kernel queued before it
    (the whole forward pass) to be read back. Compiled code runs this eagerly, between its
    graphs.
    """
    rows = torch.tensor([t.shape[0] for t in tensors])
    all_rows = [torch.zeros_like(rows) for _ in range(dist.get_world_size())]
    dist.all_gather(all_rows, rows, group=host_group())
    return torch.stack(all_rows).tolist()


class _GatherRows(torch.autograd.Function):
    """``[B_r, E]`` on each rank -> ``[sum B_r, E]`` on every rank (rank order), given every
    rank's ``B_r`` (``sizes``)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, sizes: list[int]) -> torch.Tensor:
        # all_gather needs equal shapes: pad a shorter shard to the largest, trim afterwards.
        padded = tensor.contiguous()
        if tensor.shape[0] < max(sizes):
            padded = tensor.new_zeros((max(sizes), *tensor.shape[1:]))
            padded[:tensor.shape[0]] = tensor
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded)
        rank = dist.get_rank()
        ctx.offset, ctx.rows = sum(sizes[:rank]), sizes[rank]
        return torch.cat([part[:size] for part, size in zip(parts, sizes)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        # Every rank computed the same loss L of the same rows, so each reaches its own rows with
        # the whole dL/dx_r, and summing the copies over ranks is a product by their number
        # (which DDP's average of the parameters' gradients divides again). Computed here, with
        # no all-reduce: one in the backward pass would run on the group where DDP all-reduces
        # its buckets, in an order that differs between ranks whose batches leave different
        # parameters unused (a learnable temperature with per-language adapters), and the
        # collectives would pair up wrongly.
        return grad[ctx.offset:ctx.offset + ctx.rows] * dist.get_world_size(), None


def gather_with_grad(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Concatenate each ``[B_r, E]`` tensor over the DDP ranks, keeping gradients.

    Every rank must compute the same loss of the gathered tensors (as the batch-contrastive
    losses do): a rank's rows take their gradient from its own copy of that loss.

    The ranks' row counts of all ``tensors`` are exchanged once (:func:`shard_rows`). Returns
    the tensors unchanged outside distributed runs (or with one process).
    """
    if not _distributed():
        return tensors
    sizes = list(zip(*shard_rows(tensors)))  # [tensor][rank]
    return tuple(_GatherRows.apply(t, list(rows)) if t.requires_grad
                 else _GatherRows.apply(t, list(rows)).detach()
                 for t, rows in zip(tensors, sizes))
