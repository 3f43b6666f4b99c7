"""CDDS's ``L_s`` under DDP, in two gloo processes against one process with the global batch.

``L_s`` contrasts every image of the batch with every caption (patch–word scores), so each
process gathers the global batch's tokens and masks (``gather_with_grad``) and computes its
loss: the value is the global batch's on every process, and DDP's average of the gradients is
one process's. The shards differ in rows (3 and 5) and in their padded lengths (each process
pads its captions and, here, its patches to its own longest), so the gather pads them to the
longest of either."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.engine.test_distributed import free_port
from xmr.models.losses import CDDSSemanticConsistencyLoss
from xmr.models.losses.cdds import semantic_consistency_loss

WORLD = 2
DIM = 6
#: The global batch's words and patches per pair; process 0 reads the first 3 pairs, 1 the rest.
WORDS = (2, 4, 3, 6, 1, 5, 2, 3)
PATCHES = (4, 4, 4, 5, 3, 5, 5, 2)
SHARDS = (slice(0, 3), slice(3, 8))


def global_batch() -> tuple[torch.Tensor, ...]:
    """``[8, 5, D]`` patches, ``[8, 6, D]`` words and their masks, padded to the longest."""
    generator = torch.Generator().manual_seed(0)
    patches = torch.randn(len(WORDS), max(PATCHES), DIM, generator=generator)
    words = torch.randn(len(WORDS), max(WORDS), DIM, generator=generator)
    patch_mask = torch.arange(max(PATCHES))[None] < torch.tensor(PATCHES)[:, None]
    word_mask = torch.arange(max(WORDS))[None] < torch.tensor(WORDS)[:, None]
    return patches, patch_mask, words, word_mask


def shard(rows: slice) -> tuple[torch.Tensor, ...]:
    """A process's pairs, padded to its own longest patch and word counts only."""
    patches, patch_mask, words, word_mask = (t[rows] for t in global_batch())
    longest_patch, longest_word = max(PATCHES[rows]), max(WORDS[rows])
    return (patches[:, :longest_patch], patch_mask[:, :longest_patch],
            words[:, :longest_word], word_mask[:, :longest_word])


class Towers(torch.nn.Module):
    """A linear map per modality in front of ``L_s``: the parameters DDP averages."""

    def __init__(self, scoring: str) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.image, self.text = torch.nn.Linear(DIM, DIM), torch.nn.Linear(DIM, DIM)
        self.loss = CDDSSemanticConsistencyLoss(temperature=0.1, scoring=scoring,
                                                loss_weight=2.0)

    def forward(self, patches, patch_mask, words, word_mask) -> torch.Tensor:
        # Zero on the padding, as the UNets give it: the loss must not read it either way.
        return self.loss(self.image(patches) * patch_mask[..., None], patch_mask,
                         self.text(words) * word_mask[..., None], word_mask)


def loss_and_grads(model: Towers, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    loss = model(*batch)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def _worker(rank: int, port: int, out_dir: str, scoring: str) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=WORLD)
    loss, grads = loss_and_grads(Towers(scoring), shard(SHARDS[rank]))
    # DDP's reduction of the parameters' gradients: their mean over the processes.
    for grad in grads.values():
        dist.all_reduce(grad)
        grad /= WORLD
    # What each process would have computed of its own shard alone (the earlier per-rank L_s).
    alone = semantic_consistency_loss(*shard(SHARDS[rank]), temperature=0.1, scoring=scoring)
    dist.destroy_process_group()
    torch.save(dict(loss=loss, grads=grads, alone=alone), Path(out_dir) / f'rank{rank}.pt')


@pytest.mark.parametrize('scoring', ['patch_word', 'pooled'])
def test_two_gloo_processes_train_l_s_as_one_process_with_the_global_batch(tmp_path, scoring):
    mp.start_processes(_worker, args=(free_port(), str(tmp_path), scoring), nprocs=WORLD,
                       join=True, start_method='fork')
    loss, grads = loss_and_grads(Towers(scoring), global_batch())
    for rank in range(WORLD):
        result = torch.load(tmp_path / f'rank{rank}.pt')
        # Every process computes the global batch's loss ...
        torch.testing.assert_close(result['loss'], loss, rtol=1e-6, atol=1e-6)
        # ... which its shard alone does not give: the test tells a per-rank L_s apart.
        assert not torch.isclose(2 * result['alone'], loss, rtol=1e-3)
        for name, grad in grads.items():
            torch.testing.assert_close(result['grads'][name], grad, rtol=1e-5, atol=1e-6,
                                       msg=name)


def test_the_single_process_loss_is_the_hand_computed_infonce_of_patch_word_scores():
    """The reference of the test above, derived by hand: every word's best real patch,
    averaged over the caption's real words, then the symmetric InfoNCE at τ."""
    patches, patch_mask, words, word_mask = global_batch()
    batch = len(WORDS)
    scores = torch.empty(batch, batch)
    for i in range(batch):
        image = torch.nn.functional.normalize(patches[i, :PATCHES[i]], dim=-1)
        for t in range(batch):
            text = torch.nn.functional.normalize(words[t, :WORDS[t]], dim=-1)
            scores[i, t] = (text @ image.T).max(dim=1).values.mean()
    logits = scores / 0.1
    target = torch.arange(batch)
    expected = (torch.nn.functional.cross_entropy(logits, target)
                + torch.nn.functional.cross_entropy(logits.T, target)) / 2
    torch.testing.assert_close(
        semantic_consistency_loss(patches, patch_mask, words, word_mask, 0.1), expected,
        rtol=1e-5, atol=1e-6)
