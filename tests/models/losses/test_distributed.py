"""``gather_with_grad`` in two gloo processes: shards of unequal and equal size gathered in rank
order, each rank's gradient the sum of every rank's, and the shards' row counts exchanged on the
host through a gloo group beside a default group of another backend (NCCL's case)."""
from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.engine.test_distributed import free_port
from xmr.models.losses import distributed

WORLD = 2


def shard(rank: int, rows: int) -> torch.Tensor:
    """Rank ``rank``'s ``[rows, 2]`` embeddings: ``100·rank + row`` in both columns."""
    return (100.0 * rank + torch.arange(rows, dtype=torch.float32)).unsqueeze(1).repeat(1, 2)


def _worker(rank: int, port: int, out_dir: str, shard_rows: tuple[int, ...],
            default_backend: str) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=WORLD)
    backend_of, all_gather = dist.get_backend, dist.all_gather
    # The default group reports the backend under test; every other group its own.
    dist.get_backend = lambda group=None: default_backend if group is None else backend_of(group)
    routes = []

    def recorded_all_gather(parts, tensor, group=None, **kwargs):
        routes.append((str(tensor.dtype), 'host' if group is host else 'default'))
        return all_gather(parts, tensor, group=group, **kwargs)

    dist.all_gather = recorded_all_gather
    try:
        host = distributed.host_group()
        host_backend = None if host is None else backend_of(host)
        kept = distributed.host_group() is host
        a = shard(rank, shard_rows[rank]).requires_grad_()
        b = shard(rank, shard_rows[rank])
        counts = distributed.shard_rows((a, b[:1]))
        gathered_a, gathered_b = distributed.gather_with_grad(a, b)
        weights = torch.arange(1.0, 1.0 + 2 * sum(shard_rows)).reshape(-1, 2)
        (gathered_a * weights).sum().backward()
    finally:
        dist.get_backend, dist.all_gather = backend_of, all_gather
    # Media keys (int64, no gradient) travel with the embeddings of a loss that masks by them.
    keys = distributed.gather_with_grad(torch.arange(shard_rows[rank]) + 1000 * rank)[0]
    torch.save(dict(host_backend=host_backend, kept=kept, counts=counts, routes=routes,
                    a=gathered_a.detach(), b=gathered_b, b_grad=gathered_b.requires_grad,
                    grad=a.grad, keys=keys),
               Path(out_dir) / f'rank{rank}.pt')
    dist.destroy_process_group()


def gather(tmp_path: Path, shard_rows: tuple[int, ...], default_backend: str) -> list[dict]:
    mp.start_processes(_worker, args=(free_port(), str(tmp_path), shard_rows, default_backend),
                       nprocs=WORLD, join=True, start_method='fork')
    return [torch.load(tmp_path / f'rank{rank}.pt') for rank in range(WORLD)]


def test_unequal_shards_gather_in_rank_order_with_counts_exchanged_beside_nccl(tmp_path):
    ranks = gather(tmp_path, (3, 5), default_backend='nccl')
    full = torch.cat([shard(0, 3), shard(1, 5)])
    weights = torch.arange(1.0, 17.0).reshape(8, 2)
    for rank, result in enumerate(ranks):
        assert result['host_backend'] == 'gloo' and result['kept']
        assert result['counts'] == [[3, 1], [5, 1]]
        # The counts (int64) through the host's group, twice (once for the gather); the
        # embeddings through the default one.
        assert result['routes'] == [('torch.int64', 'host')] * 2 + [('torch.float32',
                                                                     'default')] * 2
        torch.testing.assert_close(result['a'], full, rtol=0, atol=0)
        torch.testing.assert_close(result['b'], full, rtol=0, atol=0)
        assert not result['b_grad']
        # Both ranks computed the same loss: each rank's rows get the sum of the two gradients.
        rows = slice(0, 3) if rank == 0 else slice(3, 8)
        torch.testing.assert_close(result['grad'], WORLD * weights[rows], rtol=0, atol=0)
        assert result['keys'].tolist() == [0, 1, 2, 1000, 1001, 1002, 1003, 1004]


def test_equal_shards_gather_through_the_default_gloo_group(tmp_path):
    ranks = gather(tmp_path, (4, 4), default_backend='gloo')
    full = torch.cat([shard(0, 4), shard(1, 4)])
    weights = torch.arange(1.0, 17.0).reshape(8, 2)
    for rank, result in enumerate(ranks):
        assert result['host_backend'] is None  # the counts go through the default group
        assert result['counts'] == [[4, 1], [4, 1]]
        torch.testing.assert_close(result['a'], full, rtol=0, atol=0)
        torch.testing.assert_close(result['grad'], WORLD * weights[4 * rank:4 * rank + 4],
                                   rtol=0, atol=0)


class _PerLanguageScorer(torch.nn.Module):
    """One linear map per language, then a gathered contrastive score with a learnable scale
    after the gather (a learnable InfoNCE temperature with per-language adapters)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.languages = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(WORLD))
        self.scale = torch.nn.Parameter(torch.tensor(2.0))

    def forward(self, texts: torch.Tensor, media: torch.Tensor, language: int) -> torch.Tensor:
        return self.loss(*distributed.gather_with_grad(self.languages[language](texts), media))

    def loss(self, texts: torch.Tensor, media: torch.Tensor) -> torch.Tensor:
        logits = self.scale * texts @ media.T
        return torch.nn.functional.cross_entropy(logits, torch.arange(len(texts)))


def _batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s texts and media, ``[3 + 2·rank, 4]`` each: shards of unequal size."""
    generator = torch.Generator().manual_seed(rank)
    rows = 3 + 2 * rank
    return torch.randn(rows, 4, generator=generator), torch.randn(rows, 4, generator=generator)


def _ddp_worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=WORLD)
    # One bucket per parameter: each rank's unused language makes its own bucket ready early.
    model = torch.nn.parallel.DistributedDataParallel(
        _PerLanguageScorer(), find_unused_parameters=True, bucket_cap_mb=1e-6)
    for _ in range(3):
        model.zero_grad()
        loss = model(*_batch(rank), language=rank)
        loss.backward()
    torch.save(dict(loss=loss.detach(), grads={name: p.grad for name, p in
                                               model.module.named_parameters()}),
               Path(out_dir) / f'rank{rank}.pt')
    dist.destroy_process_group()


def test_ranks_training_other_languages_with_a_learnable_scale_get_one_process_s_gradients(
        tmp_path):
    """Each rank trains its own language's map, so DDP finds different unused parameters per
    rank and readies their buckets in a different order; the gather's backward must not add a
    collective that those buckets' all-reduces could pair up with (gloo aborted here). The
    shards are of unequal size (3 and 5 rows): DDP's average over the ranks must still give the
    loss and the gradients of one process with the 8 rows."""
    mp.start_processes(_ddp_worker, args=(free_port(), str(tmp_path)), nprocs=WORLD, join=True,
                       start_method='fork')
    reference = _PerLanguageScorer()
    batches = [_batch(rank) for rank in range(WORLD)]
    texts = torch.cat([reference.languages[rank](batches[rank][0]) for rank in range(WORLD)])
    loss = reference.loss(texts, torch.cat([media for _, media in batches]))
    loss.backward()
    for rank in range(WORLD):
        result = torch.load(tmp_path / f'rank{rank}.pt')
        torch.testing.assert_close(result['loss'], loss.detach(), rtol=1e-6, atol=1e-7)
        for name, parameter in reference.named_parameters():
            torch.testing.assert_close(result['grads'][name], parameter.grad, rtol=1e-5,
                                       atol=1e-6)


def test_a_default_group_with_gloo_for_host_tensors_is_the_host_group(monkeypatch):
    """torch's default backend on a CUDA machine, ``cpu:gloo,cuda:nccl``, exchanges host
    tensors through gloo already: no second group is made."""
    monkeypatch.setattr(distributed.dist, 'get_backend', lambda: 'cpu:gloo,cuda:nccl')
    assert distributed.host_group() is None


def _token_worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=WORLD)
    # Rank 0: 2 samples of 3 tokens; rank 1: 3 samples of 5 tokens (each its own longest).
    rows, length = (2, 3) if rank == 0 else (3, 5)
    tokens = (100.0 * rank + torch.arange(rows * length * 2, dtype=torch.float32)
              ).reshape(rows, length, 2).requires_grad_()
    mask = torch.ones(rows, length, dtype=torch.bool)
    gathered, gathered_mask = distributed.gather_with_grad(tokens, mask)
    weights = torch.arange(1.0, 1.0 + gathered.numel()).reshape(gathered.shape)
    (gathered * weights).sum().backward()
    torch.save(dict(tokens=gathered.detach(), mask=gathered_mask, grad=tokens.grad,
                    weights=weights), Path(out_dir) / f'rank{rank}.pt')
    dist.destroy_process_group()


def test_tokens_of_unequal_lengths_gather_padded_to_the_longest_with_their_masks(tmp_path):
    mp.start_processes(_token_worker, args=(free_port(), str(tmp_path)), nprocs=WORLD,
                       join=True, start_method='fork')
    for rank in range(WORLD):
        result = torch.load(tmp_path / f'rank{rank}.pt')
        assert result['tokens'].shape == (5, 5, 2)
        assert result['mask'].dtype == torch.bool
        assert result['mask'].tolist() == [[True] * 3 + [False] * 2] * 2 + [[True] * 5] * 3
        # Rank 0's two samples, zero on the padding; rank 1's three as they were.
        torch.testing.assert_close(result['tokens'][:2, :3].flatten(), torch.arange(12.0))
        assert not result['tokens'][:2, 3:].any()
        torch.testing.assert_close(result['tokens'][2:].flatten(), 100 + torch.arange(30.0))
        # Each rank's gradient: its own rows and length of both ranks' identical losses.
        own = (slice(0, 2), slice(0, 3)) if rank == 0 else (slice(2, 5), slice(0, 5))
        torch.testing.assert_close(result['grad'], WORLD * result['weights'][own],
                                   rtol=0, atol=0)
