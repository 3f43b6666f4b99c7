"""Batch-coupled losses under DDP: gather the embeddings of every rank, with gradients.

InfoNCE compares each caption with every medium of the batch, so a rank that sees only its
shard of the batch would train on fewer negatives than the configured global batch (DASD's 128).
Gathering the embeddings makes each rank compute the loss of the global batch; each rank's own
rows then carry the whole gradient of that loss, scaled by the number of ranks, and DDP's
averaging gives exactly the single-process gradient of the global batch.

Token tensors ``[B_r, N_r, D]`` and their masks (CDDS's ``L_s``) differ between ranks in their
length too (each rank pads its captions to its own longest): they are gathered padded, in every
dimension after the first, to the longest of any rank, with zeros (``False`` in a mask).
"""
from __future__ import annotations

import functools
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ['gather_with_grad', 'shard_rows', 'shard_shapes']


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
def shard_shapes(tensors: tuple[torch.Tensor, ...]) -> list[list[list[int]]]:
    """The shape of each of ``tensors`` on every rank: ``[rank][tensor]``, in one collective.

    The shapes are known to the host and are exchanged there (:func:`host_group`): under NCCL a
    count sent through the device would wait for every kernel queued before it (the whole
    forward pass) to be read back. Compiled code runs this eagerly, between its graphs. Every
    rank passes tensors of the same dimensions (the same call of the same code).
    """
    dims = [t.dim() for t in tensors]
    flat = torch.tensor([size for t in tensors for size in t.shape], dtype=torch.long)
    every = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(every, flat, group=host_group())
    shapes = []
    for sizes in torch.stack(every).tolist():
        shapes.append([])
        for dim in dims:
            shapes[-1].append(sizes[:dim])
            sizes = sizes[dim:]
    return shapes


@torch.compiler.disable
def shard_rows(tensors: tuple[torch.Tensor, ...]) -> list[list[int]]:
    """The rows of each of ``tensors`` on every rank: ``[rank][tensor]``, in one collective
    (:func:`shard_shapes`'s first dimensions)."""
    return [[shape[0] for shape in rank] for rank in shard_shapes(tensors)]


class _GatherRows(torch.autograd.Function):
    """``[B_r, ...]`` on each rank -> ``[sum B_r, ...]`` on every rank (rank order), given every
    rank's ``B_r`` (``sizes``) and, where the ranks' other dimensions differ, the largest of each
    (``width``, ``None``: this rank's): a shorter tensor is padded with zeros (``False``)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, sizes: list[int],
                width: list[int] | None = None) -> torch.Tensor:
        # all_gather needs equal shapes: pad a shorter shard to the largest, trim its rows
        # afterwards (the other dimensions stay padded: a mask tells the padding).
        shape = (max(sizes), *(tensor.shape[1:] if width is None else width))
        padded = tensor.contiguous()
        if tuple(tensor.shape) != shape:
            padded = tensor.new_zeros(shape)
            padded[tuple(slice(0, size) for size in tensor.shape)] = tensor
        # Sent as bytes: not every backend takes bool tensors.
        sent = padded.view(torch.uint8) if padded.dtype == torch.bool else padded
        parts = [torch.empty_like(sent) for _ in sizes]
        dist.all_gather(parts, sent)
        rank = dist.get_rank()
        ctx.own = (slice(sum(sizes[:rank]), sum(sizes[:rank + 1])),
                   *(slice(0, size) for size in tensor.shape[1:]))
        gathered = torch.cat([part[:size] for part, size in zip(parts, sizes)])
        return gathered.view(torch.bool) if padded.dtype == torch.bool else gathered

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        # Every rank computed the same loss L of the same rows, so each reaches its own rows with
        # the whole dL/dx_r, and summing the copies over ranks is a product by their number
        # (which DDP's average of the parameters' gradients divides again). Computed here, with
        # no all-reduce: one in the backward pass would run on the group where DDP all-reduces
        # its buckets, in an order that differs between ranks whose batches leave different
        # parameters unused (a learnable temperature with per-language adapters), and the
        # collectives would pair up wrongly. The padding of the other dimensions is no input.
        return grad[ctx.own] * dist.get_world_size(), None, None


def gather_with_grad(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Concatenate each ``[B_r, ...]`` tensor over the DDP ranks, keeping gradients.

    Every rank must compute the same loss of the gathered tensors (as the batch-contrastive
    losses do): a rank's rows take their gradient from its own copy of that loss.

    The ranks' shapes of all ``tensors`` are exchanged once (:func:`shard_shapes`). A tensor
    whose dimensions after the first differ between ranks (tokens ``[B_r, N_r, D]`` and their
    masks ``[B_r, N_r]``, each rank padded to its longest) is gathered at the largest of each,
    padded with zeros (``False``), so a mask gathered with its tokens marks the padding of both.
    Returns the tensors unchanged outside distributed runs (or with one process).
    """
    if not _distributed():
        return tensors
    shapes = list(zip(*shard_shapes(tensors)))  # [tensor][rank]
    gathered = []
    for tensor, ranks in zip(tensors, shapes):
        rows = [shape[0] for shape in ranks]
        width = [max(sizes) for sizes in zip(*(shape[1:] for shape in ranks))]
        out = _GatherRows.apply(tensor, rows, width)
        gathered.append(out if tensor.requires_grad else out.detach())
    return tuple(gathered)
