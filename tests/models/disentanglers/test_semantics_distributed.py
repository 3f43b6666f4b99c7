"""DASD's ``L_sc`` under DDP, in two gloo processes against one process with the global batch.

The paper's ``L_sc`` (L1, per caption) needs no gather: each process's mean over its shard,
with DDP's average of the gradients, is the global batch's mean. A batch-contrastive ``L_sc``
(``InfoNCELoss``) compares each caption with the others of the batch, so the SDM gathers the
global batch for it; before, each process contrasted its own shard only. With one SDM per
language it is one loss over the whole batch's ``f^sr`` (one gather, whatever languages a
process's batch holds); before, that combination was refused."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.conftest import tiny_backbone_cfg
from tests.engine.test_distributed import free_port
from xmr.models.disentanglers import PerLanguageDisentangler, SemanticsDisentangler
from xmr.registry import DISENTANGLERS, MODELS

WORLD = 2
#: Captions of the global batch, and their lengths (each process reads a half).
LENGTHS = (5, 3, 4, 2, 5, 1, 3, 4)
SHARD = len(LENGTHS) // WORLD


def tower():
    torch.manual_seed(0)
    return MODELS.build(tiny_backbone_cfg()).text_tower


def build(text_tower, consistency_loss: dict) -> SemanticsDisentangler:
    torch.manual_seed(1)
    return DISENTANGLERS.build(
        dict(type='SemanticsDisentangler', adapter=dict(type='StaticAdapter', hidden=8),
             generator=dict(d_z=16, d_u=4), use_adversarial=False, features=['sr'],
             consistency_loss=consistency_loss),
        default_args=dict(tower=text_tower))


def global_batch(text_tower) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """The global batch: ``[8, 5, D]`` embeddings, their tokens and ``[8, E]`` ``r^S``."""
    generator = torch.Generator().manual_seed(2)
    lengths = torch.tensor(LENGTHS)
    longest = int(lengths.max())
    tokens = dict(input_ids=torch.zeros(len(LENGTHS), longest, dtype=torch.long),
                  attention_mask=torch.arange(longest)[None] < lengths[:, None],
                  eos_index=lengths - 1)
    embeddings = text_tower.add_positions(
        torch.randn(len(LENGTHS), longest, text_tower.width, generator=generator) * 0.1)
    return embeddings, tokens, torch.randn(len(LENGTHS), text_tower.embed_dim,
                                           generator=generator)


def sc_and_grads(sdm: SemanticsDisentangler, embeddings, tokens, r_source
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    sdm.zero_grad()
    loss = sdm(embeddings, tokens, r_source=r_source)[1]['sc']
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in sdm.named_parameters()
                           if p.grad is not None}


def _joined_shard(rank: int, port: int) -> tuple[torch.nn.Module, tuple, slice]:
    """Join the gloo group; the tower, this rank's ``(embeddings, tokens, r_source)`` of the
    global batch and its rows. The shard's tokens stay padded to the global batch's longest
    caption: the SDM masks padding, and one width keeps the comparison to the rows alone."""
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=WORLD)
    text_tower = tower()
    embeddings, tokens, r_source = global_batch(text_tower)
    rows = slice(rank * SHARD, (rank + 1) * SHARD)
    return text_tower, (embeddings[rows], {key: value[rows] for key, value in tokens.items()},
                        r_source[rows]), rows


def _worker(rank: int, port: int, out_dir: str, consistency_loss: dict) -> None:
    text_tower, shard, _ = _joined_shard(rank, port)
    loss, grads = sc_and_grads(build(text_tower, consistency_loss), *shard)
    # DDP's reduction of the parameters' gradients: their mean over the processes.
    for grad in grads.values():
        dist.all_reduce(grad)
        grad /= WORLD
    torch.save(dict(loss=loss, grads=grads), Path(out_dir) / f'rank{rank}.pt')
    dist.destroy_process_group()


@pytest.mark.parametrize('consistency_loss', [
    dict(type='AlignmentLoss', kind='l1'),  # the paper's, per caption: nothing gathered
    dict(type='InfoNCELoss', temperature=0.1),  # in-batch negatives: the global batch
])
def test_two_gloo_processes_train_l_sc_as_one_process_with_the_global_batch(tmp_path,
                                                                          consistency_loss):
    mp.start_processes(_worker, args=(free_port(), str(tmp_path), consistency_loss),
                       nprocs=WORLD, join=True, start_method='fork')
    text_tower = tower()
    loss, grads = sc_and_grads(build(text_tower, consistency_loss), *global_batch(text_tower))
    ranks = [torch.load(tmp_path / f'rank{rank}.pt') for rank in range(WORLD)]
    assert grads and set(ranks[0]['grads']) == set(grads)
    for rank in ranks:
        for name, grad in grads.items():
            torch.testing.assert_close(rank['grads'][name], grad, rtol=1e-5, atol=1e-7,
                                       msg=name)
    if consistency_loss['type'] == 'InfoNCELoss':
        # Every process computes the global batch's loss itself.
        for rank in ranks:
            torch.testing.assert_close(rank['loss'], loss, rtol=1e-6, atol=1e-7)
    else:
        # Each its shard's mean, whose mean is the global batch's.
        torch.testing.assert_close(sum(rank['loss'] for rank in ranks) / WORLD, loss,
                                   rtol=1e-6, atol=1e-7)


def test_an_l_sc_that_masks_by_media_or_trains_a_temperature_per_language_is_refused():
    text_tower = tower()
    with pytest.raises(ValueError, match=(
            r'model.disentangler.consistency_loss \(InfoNCELoss\) has mask_same_media=True, '
            'but the SDM is given no media keys')):
        build(text_tower, dict(type='InfoNCELoss', mask_same_media=True))
    learnable = {lang: build(text_tower, dict(type='InfoNCELoss', learnable=True))
                 for lang in ('de', 'zh')}
    with pytest.raises(ValueError, match=(
            r'consistency_loss \(InfoNCELoss\) trains log_scale of its own, one per language '
            r'.* \(InfoNCELoss: learnable=False, a fixed temperature\), or set '
            'model.disentangler.per_language=False')):
        PerLanguageDisentangler(learnable)
    # A fixed temperature, and a per-caption L_sc, are built.
    for consistency_loss in (dict(type='InfoNCELoss'), dict(type='AlignmentLoss', kind='l1')):
        PerLanguageDisentangler({lang: build(text_tower, consistency_loss)
                                 for lang in ('de', 'zh')})


#: The global batch's languages: process 0 reads a mix, process 1 one language only, so the
#: processes' groups differ (a gather per group would pair them wrongly, or hang).
LANGS = ('de', 'zh', 'de', 'de', 'zh', 'zh', 'zh', 'zh')
CONTRASTIVE = dict(type='InfoNCELoss', temperature=0.1)


def per_language(text_tower) -> PerLanguageDisentangler:
    return PerLanguageDisentangler({lang: build(text_tower, CONTRASTIVE)
                                    for lang in ('de', 'zh')})


def per_language_sc_and_grads(module: PerLanguageDisentangler, embeddings, tokens, r_source,
                              langs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    module.zero_grad()
    loss = module(embeddings, tokens, r_source=r_source, langs=list(langs))[1]['sc']
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in module.named_parameters()
                           if p.grad is not None}


def test_a_per_language_contrastive_l_sc_is_the_infonce_of_the_whole_batch_by_hand():
    """Each caption's ``f^sr`` from its language's module, then one InfoNCE over the batch:
    every caption against every ``r^S`` of the batch (other languages' included), derived
    here from the modules' own ``f^sr``; with one language a batch, that module's loss."""
    text_tower = tower()
    module = per_language(text_tower)
    embeddings, tokens, r_source = global_batch(text_tower)
    condition, losses = module(embeddings, tokens, r_source=r_source, langs=list(LANGS))
    assert set(losses) == {'sc'}
    f_sr = torch.cat([module.per_language[lang].semantic_related(
        embeddings[i:i + 1], {key: value[i:i + 1] for key, value in tokens.items()})
        for i, lang in enumerate(LANGS)])
    logits = (torch.nn.functional.normalize(f_sr, dim=-1)
              @ torch.nn.functional.normalize(r_source, dim=-1).T) / 0.1
    target = torch.arange(len(LANGS))
    expected = 0.1 * (torch.nn.functional.cross_entropy(logits, target)  # lambda_2 = 0.1
                      + torch.nn.functional.cross_entropy(logits.T, target)) / 2
    torch.testing.assert_close(losses['sc'], expected, rtol=1e-5, atol=1e-6)
    # Not the mean of each language's own contrastive loss (negatives of its language only).
    groups = sum(sum(lang == code for code in LANGS) / len(LANGS) * module.per_language[lang](
        embeddings[[i for i, code in enumerate(LANGS) if code == lang]],
        {key: value[[i for i, code in enumerate(LANGS) if code == lang]]
         for key, value in tokens.items()},
        r_source=r_source[[i for i, code in enumerate(LANGS) if code == lang]])[1]['sc']
        for lang in ('de', 'zh'))
    assert not torch.isclose(groups, expected, rtol=1e-3)
    # One language a batch: the language's module's own loss of the batch.
    own = module.per_language['zh'](embeddings, tokens, r_source=r_source)[1]['sc']
    torch.testing.assert_close(
        module(embeddings, tokens, r_source=r_source, langs=['zh'] * len(LANGS))[1]['sc'], own,
        rtol=1e-6, atol=1e-7)


def test_a_per_language_contrastive_l_sc_gives_the_source_embeddings_no_gradient():
    """``r^S`` is the frozen target of ``L_sc``, over the whole batch as in one module."""
    text_tower = tower()
    module = per_language(text_tower)
    embeddings, tokens, r_source = global_batch(text_tower)
    r_source = r_source.clone().requires_grad_()
    module(embeddings, tokens, r_source=r_source, langs=list(LANGS))[1]['sc'].backward()
    assert r_source.grad is None
    assert any(p.grad is not None for p in module.parameters())


def _per_language_worker(rank: int, port: int, out_dir: str) -> None:
    text_tower, shard, rows = _joined_shard(rank, port)
    module = per_language(text_tower)
    loss, grads = per_language_sc_and_grads(module, *shard, LANGS[rows])
    # DDP's reduction: the mean over the processes, a zero where a process trained none (its
    # batch without the language: find_unused_parameters).
    for name, parameter in module.named_parameters():
        grad = grads.setdefault(name, torch.zeros_like(parameter))
        dist.all_reduce(grad)
        grad /= WORLD
    torch.save(dict(loss=loss, grads=grads), Path(out_dir) / f'rank{rank}.pt')
    dist.destroy_process_group()


def test_two_gloo_processes_train_a_per_language_contrastive_l_sc_as_one_process(tmp_path):
    mp.start_processes(_per_language_worker, args=(free_port(), str(tmp_path)), nprocs=WORLD,
                       join=True, start_method='fork')
    text_tower = tower()
    loss, grads = per_language_sc_and_grads(per_language(text_tower),
                                            *global_batch(text_tower), LANGS)
    assert {name.split('.')[1] for name in grads} == {'de', 'zh'}
    for rank in range(WORLD):
        result = torch.load(tmp_path / f'rank{rank}.pt')
        torch.testing.assert_close(result['loss'], loss, rtol=1e-6, atol=1e-7)
        for name, grad in grads.items():
            torch.testing.assert_close(result['grads'][name], grad, rtol=1e-5, atol=1e-7,
                                       msg=name)
