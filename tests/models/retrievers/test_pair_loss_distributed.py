"""``BaseRetriever.pair_loss`` under DDP: in two gloo processes, each loss that masks the other
captions of a medium (``mask_same_media``) gathers the batch's ``media_keys`` with the embeddings,
and the loss and the DDP-averaged gradients equal one process's on the concatenated batch, a
medium whose captions fall on both ranks included. Unequal shards (a last batch without
``drop_last``) too."""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from tests.engine.test_distributed import free_port
from xmr.datasets.collate import media_keys
from xmr.models.losses import InfoNCELoss, SigmoidLoss, VSEHingeLoss
from xmr.models.retrievers.base import BaseRetriever

WORLD = 2
ROWS = (3, 5)
# Medium 'm0' on both ranks, 'm1' twice on rank 1, 'm2' on both: masked pairs across ranks.
MEDIA = (['m0', 'm2', 'm3'], ['m1', 'm0', 'm1', 'm4', 'm2'])


def losses() -> dict[str, nn.Module]:
    return dict(
        infonce=InfoNCELoss(temperature=0.1, mask_same_media=True),
        infonce_unmasked=InfoNCELoss(temperature=0.1),
        hinge=VSEHingeLoss(margin=0.2, hardest_after_pairs=None, mask_same_media=True),
        hardest=VSEHingeLoss(margin=0.2, hardest_after_pairs=0, mask_same_media=True),
        sigmoid=SigmoidLoss(logit_scale=10.0, logit_bias=-2.0, mask_same_media=True))


def inputs() -> tuple[torch.Tensor, torch.Tensor, nn.Linear]:
    """The global batch's inputs ``[8, 6]`` twice, and the shared projection both towers use."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(sum(ROWS), 6, generator=generator)
    y = torch.randn(sum(ROWS), 6, generator=generator)
    projection = nn.Linear(6, 4)
    with torch.no_grad():
        projection.weight.copy_(torch.randn(4, 6, generator=generator))
        projection.bias.copy_(torch.randn(4, generator=generator))
    return x, y, projection


def run(name: str, rows: slice | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The loss ``name`` of the rows ``rows`` (all: one process) and its projection's grads."""
    x, y, projection = inputs()
    keys = media_keys(MEDIA[0] + MEDIA[1])
    if rows is not None:
        x, y, keys = x[rows], y[rows], keys[rows]
    retriever = SimpleNamespace(losses=losses(), loss_weights={name: 1.0})
    loss = BaseRetriever.pair_loss(retriever, name, projection(x), projection(y) * 2, keys)
    loss.backward()
    return loss.detach(), [p.grad for p in projection.parameters()]


def _worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=WORLD)
    rows = slice(0, ROWS[0]) if rank == 0 else slice(ROWS[0], sum(ROWS))
    results = {}
    for name in losses():
        loss, grads = run(name, rows)
        for grad in grads:  # what DDP does to the projection's gradients
            dist.all_reduce(grad)
            grad /= WORLD
        results[name] = (loss, grads)
    torch.save(results, Path(out_dir) / f'rank{rank}.pt')
    dist.destroy_process_group()


def test_masked_losses_under_ddp_equal_one_process_on_the_global_batch(tmp_path, monkeypatch):
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    mp.start_processes(_worker, args=(free_port(), str(tmp_path)), nprocs=WORLD, join=True,
                       start_method='fork')
    ranks = [torch.load(tmp_path / f'rank{rank}.pt') for rank in range(WORLD)]
    for name in losses():
        loss, grads = run(name, None)
        for rank in ranks:
            torch.testing.assert_close(rank[name][0], loss, msg=name)
            for got, expected in zip(rank[name][1], grads):
                torch.testing.assert_close(got, expected, msg=name)
    # The masking mattered: the unmasked loss differs.
    assert not torch.allclose(ranks[0]['infonce'][0], ranks[0]['infonce_unmasked'][0])
