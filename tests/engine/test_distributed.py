"""DDP: two CPU (gloo) processes train exactly like one process with the same global batch.

The second phase trains a tower weight that was frozen when the runner first wrapped the model
(the text projection): without the per-phase re-wrap it would never be synchronised and the
ranks would drift apart. Its InfoNCE loss sees the global batch through ``gather_with_grad``.
DASD's compiled losses train under DDP as its eager ones do.
"""
from __future__ import annotations

import inspect
import os
import signal
import socket
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp
from mmengine.config import Config
from mmengine.dataset import DefaultSampler
from mmengine.hooks import Hook
from mmengine.runner import Runner
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from tests.conftest import differences, tiny_branch_cfg, tiny_retriever_cfg
from xmr.datasets.language_batch_sampler import GlobalBatchSampler
from xmr.engine import distributed
from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
from xmr.engine.distributed import padded_repeats, phase_wrapper_cfg, setup_cpu_distributed
from xmr.engine.hooks import PreemptionHook
from xmr.registry import HOOKS, MODELS
from xmr.utils.cli import UserError

GLOBAL_BATCH = 8
WORLD = 2
TRAINED = ('language_branch.', 'backbone.clip.text_projection')
PHASES = [
    dict(name='cross_lingual', iters=2, lr=1e-2, warmup_ratio=0.0, schedule='constant',
         trainable=['language_branch.embedding'], loss_weights=dict(cl=1.0)),
    dict(name='cross_modal', iters=2, lr=1e-2, warmup_ratio=0.0, schedule='constant',
         trainable=['language_branch.adapters', 'backbone.clip.text_projection'],
         loss_weights=dict(cm=1.0)),
]


def make_cfg(work_dir: Path, batch_size: int, batching: str = 'mixed') -> Config:
    """Two phases on 32 synthetic pairs (de, zh) in unshuffled mixed batches; ``batching``
    ``'one_language'``: one language a batch (``LanguageBatchSampler``, shuffled);
    ``'global_odd'``: 19 German pairs, which no world size of 2 divides, in shuffled global
    batches (``GlobalBatchSampler``)."""
    cfg = Config(dict(
        default_scope='xmr',
        work_dir=str(work_dir),
        model=tiny_retriever_cfg(),
        train_dataloader=dict(
            batch_size=batch_size, num_workers=0, drop_last=True,
            sampler=dict(type='DefaultSampler', shuffle=False),
            collate_fn=dict(type='xmr.retrieval_collate'),
            dataset=dict(type='SyntheticPairDataset', num_scenes=16, languages=['de', 'zh'],
                         image_size=32, seed=0)),
        train_cfg=dict(type='PhasedTrainLoop', phases=PHASES, val_interval=0),
        optim_wrapper=dict(type='OptimWrapper', constructor='PhasedOptimWrapperConstructor',
                           optimizer=dict(type='AdamW', lr=1e-2, weight_decay=0.1),
                           clip_grad=dict(max_norm=1.0)),
        default_hooks=dict(checkpoint=None, logger=dict(type='LoggerHook', interval=100)),
        randomness=dict(seed=0),
        log_level='WARNING',
    ))
    if batching != 'mixed':
        cfg.train_dataloader.pop('drop_last')
        cfg.train_dataloader.update(sampler=dict(type='DefaultSampler', shuffle=True),
                                    batch_sampler=dict(type='LanguageBatchSampler'))
    if batching == 'global_odd':
        cfg.train_dataloader.batch_sampler.type = 'GlobalBatchSampler'
        cfg.train_dataloader.dataset.update(num_scenes=19, languages=['de'])
    return cfg


def trained_state(runner: Runner) -> dict[str, torch.Tensor]:
    model = getattr(runner.model, 'module', runner.model)
    return {name: value.detach().clone() for name, value in model.state_dict().items()
            if name.startswith(TRAINED)}


def dasd_cfg(work_dir: Path, batch_size: int, compile: dict | None) -> Config:
    """``make_cfg`` with DASD's modules (a tiny SDM, dynamic adapters), both phases training
    the branch and the SDM, and the model's ``compile`` option."""
    cfg = make_cfg(work_dir, batch_size)
    cfg.model = tiny_retriever_cfg(
        language_branch=tiny_branch_cfg(adapters=dict(type='DynamicAdapter', hidden=8)),
        disentangler=dict(type='SemanticsDisentangler', depth=1,
                          adapter=dict(type='StaticAdapter', hidden=8),
                          generator=dict(d_z=16, d_u=8), discriminator=dict(hidden=(16, 8)),
                          consistency_loss=dict(type='AlignmentLoss', kind='l1')),
        compile=compile)
    cfg.train_cfg.phases = [dict(phase, trainable=['target'],
                                 loss_weights=dict(phase['loss_weights'], disentangler=1.0))
                            for phase in PHASES]
    return cfg


def _start(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)


def _worker(rank: int, port: int, work_dir: str, out_dir: str,
            batching: str = 'mixed') -> None:
    _start(rank, port)

    cfg = make_cfg(Path(work_dir), GLOBAL_BATCH // WORLD, batching)
    cfg.launcher = 'pytorch'
    setup_cpu_distributed(cfg, 'pytorch')
    runner = Runner.from_cfg(cfg)
    # The wrappers themselves are kept: an id alone could be reused once a wrapper is freed.
    wrappers, synced, trained = [], [], []
    original, build_reducer = (runner.train_loop._enter_phase,
                               DistributedDataParallel._build_params_for_reducer)

    def record_reducer(wrapper):
        """What the wrapper all-reduces: the parameters its reducer is built over, once."""
        parameters, sparse = build_reducer(wrapper)
        in_buckets = {id(p) for p in parameters}
        synced.append({n for n, p in wrapper.module.named_parameters() if id(p) in in_buckets})
        return parameters, sparse

    def record_wrapper(phase, fresh):
        iterator = original(phase, fresh)
        wrappers.append(runner.model)
        trained.append({n for n, p in runner.model.module.named_parameters()
                        if p.requires_grad})
        return iterator

    DistributedDataParallel._build_params_for_reducer = record_reducer

    runner.train_loop._enter_phase = record_wrapper
    runner.train()
    torch.save(dict(state=trained_state(runner), wrappers=len({id(w) for w in wrappers}),
                    synced=synced, trained=trained),
               Path(out_dir) / f'rank{rank}.pt')
    torch.distributed.destroy_process_group()


def _dasd_worker(rank: int, port: int, work_dir: str, out_dir: str, compile: dict | None
                 ) -> None:
    _start(rank, port)
    from torch._dynamo.utils import counters

    from xmr.engine.compile_counts import compile_counts, reset_compile_counts

    reset_compile_counts()
    cfg = dasd_cfg(Path(work_dir), GLOBAL_BATCH // WORLD, compile)
    cfg.launcher = 'pytorch'
    setup_cpu_distributed(cfg, 'pytorch')
    runner = Runner.from_cfg(cfg)
    runner.train()
    state = {name: value.detach().clone() for name, value in runner.model.module.state_dict()
             .items() if name.startswith(('language_branch.', 'disentangler.'))}
    breaks = [reason for reason, count in counters['graph_break'].items() for _ in range(count)]
    from torch._dynamo.utils import get_compilation_metrics

    reasons = [m.recompile_reason for m in get_compilation_metrics() if m.recompile_reason]
    torch.save(dict(state=state, breaks=breaks, recompiles=compile_counts()['recompiles'],
                    reasons=reasons),
               Path(out_dir) / f'rank{rank}_{"compiled" if compile else "eager"}.pt')
    torch.distributed.destroy_process_group()


def _train_checkpointing_each_iteration(cfg, resume_from: str | None) -> Runner:
    """Train ``cfg`` on this rank under the launcher, checkpointed every iteration, whole or
    resumed from ``resume_from``; the runner."""
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=1, by_epoch=False)
    cfg.launcher = 'pytorch'
    allow_mmengine_checkpoint_types()
    if resume_from:
        cfg.update(resume=True, load_from=resume_from)
    setup_cpu_distributed(cfg, 'pytorch')
    runner = Runner.from_cfg(cfg)
    runner.train()
    return runner


def _seeded_per_rank_worker(rank: int, port: int, work_dir: str, out_dir: str,
                            resume_from: str | None) -> None:
    """DASD (its discriminator draws a permutation each step) with a seed per rank,
    checkpointed every iteration, trained whole or resumed from ``resume_from``."""
    _start(rank, port)
    cfg = dasd_cfg(Path(work_dir), GLOBAL_BATCH // WORLD, compile=None)
    cfg.randomness = dict(seed=0, diff_rank_seed=True)
    cfg.custom_hooks = [dict(type='RNGStateHook'), dict(type='WeightsOnlyCheckpointHook')]
    runner = _train_checkpointing_each_iteration(cfg, resume_from)
    state = {name: value.detach().clone() for name, value in runner.model.module.state_dict()
             .items() if name.startswith(('language_branch.', 'disentangler.'))}
    torch.save(state, Path(out_dir) / f'rank{rank}_{"resumed" if resume_from else "whole"}.pt')
    torch.distributed.destroy_process_group()


def _train_whole_then_resumed(worker, tmp_path: Path, monkeypatch) -> Path:
    """Run ``worker`` on every rank whole, then resumed from the whole run's ``iter_1.pth``;
    the whole run's work dir."""
    MODELS.import_from_location()
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    whole = tmp_path / 'whole'
    for work_dir, resume_from in ((whole, None), (tmp_path / 'resumed', str(whole / 'iter_1.pth'))):
        mp.start_processes(worker, args=(free_port(), str(work_dir), str(tmp_path), resume_from),
                           nprocs=WORLD, join=True, start_method='fork')
    allow_mmengine_checkpoint_types()
    return whole


def test_each_rank_resumes_its_own_random_streams(tmp_path, monkeypatch):
    """Under ``diff_rank_seed`` the ranks draw apart (the discriminator's negatives): a run
    resumed mid-phase ends where the whole run ends only if each rank gets its own streams
    back, not rank 0's."""
    whole = _train_whole_then_resumed(_seeded_per_rank_worker, tmp_path, monkeypatch)
    saved = torch.load(whole / 'iter_1.pth')['rng_state']
    assert len(saved) == WORLD and not torch.equal(saved[0]['torch'], saved[1]['torch'])
    expected = torch.load(tmp_path / 'rank0_whole.pt')
    for rank in range(WORLD):
        resumed = torch.load(tmp_path / f'rank{rank}_resumed.pt')
        assert differences(resumed, expected) == [], rank


def _accumulating_worker(rank: int, port: int, work_dir: str, out_dir: str,
                         resume_from: str | None) -> None:
    """Both phases in windows of two iterations, checkpointed every iteration, trained whole
    or resumed from ``resume_from``; each rank's final weights and the log's warnings."""
    _start(rank, port)
    cfg = make_cfg(Path(work_dir), GLOBAL_BATCH // WORLD)
    cfg.optim_wrapper.accumulative_counts = 2
    cfg.custom_hooks = [dict(type='WeightsOnlyCheckpointHook')]
    runner = _train_checkpointing_each_iteration(cfg, resume_from)
    log = Path(runner.log_dir, f'{runner.timestamp}.log').read_text(encoding='utf-8')
    torch.save(dict(state=trained_state(runner), lost='Resumed iteration number' in log),
               Path(out_dir) / f'rank{rank}_{"resumed" if resume_from else "whole"}.pt')
    torch.distributed.destroy_process_group()


def test_a_run_resumed_inside_an_accumulation_window_keeps_every_rank_s_gradients(
        tmp_path, monkeypatch):
    """Iteration 1's checkpoint falls inside cross_lingual's first window: each rank holds the
    gradients of its own half of the batch (DDP syncs none before the window's step), and the
    run resumed there ends where the whole run ends only with every rank's gradients back."""
    whole = _train_whole_then_resumed(_accumulating_worker, tmp_path, monkeypatch)
    saved = torch.load(whole / 'iter_1.pth')['optimizer']['pending_grads']
    assert len(saved) == WORLD and differences(saved[0], saved[1]) != []
    expected = torch.load(tmp_path / 'rank0_whole.pt')['state']
    for rank in range(WORLD):
        resumed = torch.load(tmp_path / f'rank{rank}_resumed.pt')
        assert differences(resumed['state'], expected) == [], rank


@HOOKS.register_module(force=True)
class SignalOneRankHook(Hook):
    """SIGTERM to rank ``rank``'s own process after iteration ``at``, as a scheduler's signal
    reaching the ranks apart (before :class:`PreemptionHook`, the lowest, reads it)."""

    def __init__(self, rank: int, at: int) -> None:
        self.rank, self.at = rank, at

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        if runner.rank == self.rank and runner.iter + 1 == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


def _preempted_runner(rank: int, port: int, work_dir: str) -> Runner:
    """A rank's runner of a DDP run whose rank 1 alone gets SIGTERM after iteration 1."""
    _start(rank, port)
    cfg = make_cfg(Path(work_dir), GLOBAL_BATCH // WORLD)
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=100, by_epoch=False)
    cfg.custom_hooks = [dict(type='PreemptionHook'), dict(type='SignalOneRankHook', rank=1, at=1)]
    cfg.launcher = 'pytorch'
    setup_cpu_distributed(cfg, 'pytorch')
    return Runner.from_cfg(cfg)


def _preempted_worker(rank: int, port: int, work_dir: str, out_dir: str) -> None:
    runner = _preempted_runner(rank, port, work_dir)
    runner.train()
    hook = next(h for h in runner.hooks if isinstance(h, PreemptionHook))
    torch.save(dict(iter=runner.iter, received=hook.received), Path(out_dir) / f'stop{rank}.pt')
    torch.distributed.destroy_process_group()


def test_a_signal_reaching_one_rank_stops_every_rank_at_the_same_iteration(tmp_path,
                                                                         monkeypatch):
    """Rank 1 alone gets SIGTERM after iteration 1: both ranks stop there (a rank a step ahead
    would block in the next step's collective), and rank 0 writes that iteration's checkpoint."""
    MODELS.import_from_location()
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    mp.start_processes(_preempted_worker, args=(free_port(), str(tmp_path / 'ddp'),
                                                str(tmp_path)),
                       nprocs=WORLD, join=True, start_method='fork')
    stops = [torch.load(tmp_path / f'stop{rank}.pt') for rank in range(WORLD)]
    assert stops == [dict(iter=1, received=signal.SIGTERM)] * WORLD
    assert sorted(p.name for p in (tmp_path / 'ddp').glob('*.pth')) == ['iter_1.pth']


def _slowly_saving_worker(rank: int, port: int, work_dir: str, out_dir: str) -> None:
    """``_preempted_worker`` whose main process takes a while to write the checkpoint (a large
    one, a slow disk): it waits for rank 1 to end training (up to 3 s) before it writes, and
    records whether it did."""
    runner = _preempted_runner(rank, port, work_dir)
    ended = Path(out_dir) / 'rank1_ended'
    if rank == 0:
        save = runner.save_checkpoint

        def save_once_rank_1_ended(*args, **kwargs) -> None:
            deadline = time.monotonic() + 3
            while not ended.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            torch.save(ended.exists(), Path(out_dir) / 'ended_before_the_save.pt')
            save(*args, **kwargs)

        runner.save_checkpoint = save_once_rank_1_ended
    runner.train()
    if rank == 1:
        ended.touch()
    torch.distributed.destroy_process_group()


def test_no_rank_ends_a_stopped_run_before_its_checkpoint_is_written(tmp_path, monkeypatch):
    """A stopped rank exits with 143, and its launcher (torchrun, srun --kill-on-bad-exit) then
    stops the others: rank 1 must not end while rank 0 still writes the stop's checkpoint, or
    that checkpoint is lost with every iteration since the last one. Rank 0's write waits for
    rank 1's end: rank 1 ends only once the file is written."""
    MODELS.import_from_location()
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    mp.start_processes(_slowly_saving_worker, args=(free_port(), str(tmp_path / 'ddp'),
                                                    str(tmp_path)),
                       nprocs=WORLD, join=True, start_method='fork')
    assert torch.load(tmp_path / 'ended_before_the_save.pt') is False
    assert (tmp_path / 'ddp' / 'iter_1.pth').is_file()


@HOOKS.register_module(force=True)
class RecordIndicesHook(Hook):
    """Records each training iteration's dataset indices."""

    def __init__(self) -> None:
        self.indices: list[list[int]] = []

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        self.indices.append(list(data_batch['index']))


def _phase_loader_worker(rank: int, port: int, work_dir: str, out_dir: str) -> None:
    """One pass of a phase with its own shuffled dataloader, a seed per rank."""
    _start(rank, port)
    cfg = make_cfg(Path(work_dir), GLOBAL_BATCH // WORLD)
    cfg.phase_dataloader = dict(cfg.train_dataloader, sampler=dict(type='DefaultSampler',
                                                                   shuffle=True))
    cfg.train_cfg.phases = [dict(PHASES[0], iters=4, dataloader='phase_dataloader')]
    cfg.randomness = dict(seed=0, diff_rank_seed=True)
    cfg.custom_hooks = [dict(type='RecordIndicesHook')]
    cfg.launcher = 'pytorch'
    setup_cpu_distributed(cfg, 'pytorch')
    runner = Runner.from_cfg(cfg)
    runner.train()
    hook = next(h for h in runner.hooks if isinstance(h, RecordIndicesHook))
    torch.save(hook.indices, Path(out_dir) / f'indices{rank}.pt')
    torch.distributed.destroy_process_group()


@pytest.mark.parametrize('randomness, seed', [({}, 7), (dict(diff_rank_seed=True), 4)])
def test_the_shared_seed_takes_back_the_rank_only_where_mmengine_added_it(monkeypatch,
                                                                         randomness, seed):
    """Rank 3 with the runner's seed 7: under ``diff_rank_seed`` MMEngine added the rank
    (7 = 4 + 3), so every rank shares 4; without it, 7 is every rank's seed already."""
    monkeypatch.setattr(distributed.dist, 'is_initialized', lambda: True)
    monkeypatch.setattr(distributed.dist, 'get_rank', lambda: 3)
    runner = SimpleNamespace(seed=7, _randomness_cfg=randomness)
    assert distributed.shared_seed(runner) == seed


def test_a_phase_s_own_loader_shards_one_permutation_under_a_seed_per_rank(tmp_path,
                                                                             monkeypatch):
    """Under ``diff_rank_seed`` the ranks' random streams differ, but a phase's own dataloader
    (``source_finetune_dataloader``) must shuffle alike on every rank, as the runner's does, so
    that the ranks read disjoint shards: 32 items, batch 4 on each of 2 ranks, 4 steps = one
    pass, every item once."""
    MODELS.import_from_location()
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    mp.start_processes(_phase_loader_worker,
                       args=(free_port(), str(tmp_path / 'ddp'), str(tmp_path)),
                       nprocs=WORLD, join=True, start_method='fork')
    seen = [i for rank in range(WORLD) for batch in torch.load(tmp_path / f'indices{rank}.pt')
            for i in batch]
    assert len(seen) == 32 and sorted(seen) == list(range(32))


def _rank_loader(items: int, world: int, rank: int, batch_size: int, drop_last: bool,
                 monkeypatch) -> DataLoader:
    """A training loader of MMEngine's ``DefaultSampler`` as rank ``rank`` of ``world`` has it."""
    monkeypatch.setattr('mmengine.dataset.sampler.get_dist_info', lambda: (rank, world))
    return DataLoader(list(range(items)), batch_size=batch_size, drop_last=drop_last,
                      sampler=DefaultSampler(list(range(items)), shuffle=True, seed=0))


@pytest.mark.parametrize('items, world, batch_size, drop_last, repeats', [
    (9, 2, 4, False, 1),   # 10 = 2 x 5: rank 1's last batch is item 0 again
    (9, 2, 4, True, 0),    # each rank drops its fifth item, the pad among them
    (7, 2, 2, True, 1),    # 8 = 2 x 4: the pad completes rank 1's second batch
    (10, 4, 3, True, 2),   # 12 = 4 x 3: ranks 2 and 3 each end on a pad, in a full batch
    (10, 4, 2, True, 0),   # 3 a rank: the third, 2 pads among them, dropped
    (8, 2, 4, False, 0),   # no pad
    (9, 1, 4, False, 0),   # one process pads nothing
])
def test_the_items_a_padded_pass_trains_twice_are_counted(items, world, batch_size, drop_last,
                                                          repeats, monkeypatch):
    """Counted by hand (comments), and against every rank's pass read whole."""
    loaders = [_rank_loader(items, world, rank, batch_size, drop_last, monkeypatch)
               for rank in range(world)]
    read = [int(i) for loader in loaders for batch in loader for i in batch]
    assert len(read) - len(set(read)) == repeats
    assert {padded_repeats(loader) for loader in loaders} == {repeats}
    monkeypatch.setattr('xmr.datasets.language_batch_sampler.get_dist_info', lambda: (0, world))
    dataset = list(range(items))
    assert padded_repeats(DataLoader(dataset, batch_sampler=GlobalBatchSampler(
        DefaultSampler(dataset, seed=0), 1))) == 0


def test_a_ddp_pass_that_pads_items_into_its_batches_is_warned_of(tmp_path, monkeypatch):
    """Rank 0 of 2 (the sampler's view): 19 pairs in batches of 4 without drop_last pad pair
    0 into rank 1's last batch; global batches pad nothing. Each loader is told of once."""
    monkeypatch.setattr('mmengine.dataset.sampler.get_dist_info', lambda: (0, WORLD))
    monkeypatch.setattr('xmr.datasets.language_batch_sampler.get_dist_info', lambda: (0, WORLD))
    for batching, warned in (('padded', 1), ('global_odd', 0)):
        cfg = make_cfg(tmp_path / batching, GLOBAL_BATCH // WORLD, 'global_odd')
        # Two runners in one second: MMEngine would name both by the same timestamp.
        cfg.experiment_name = batching
        if batching == 'padded':
            cfg.train_dataloader.batch_sampler = None
        runner = Runner.from_cfg(cfg)
        said: list[str] = []
        monkeypatch.setattr(runner.logger, 'warning',
                            lambda message, *_, said=said, **__: said.append(message))
        runner.train()
        assert [m for m in said if 'twice' in m] == [
            'phase cross_lingual: train_dataloader pads each pass of its 19 items to a multiple '
            'of the 2 processes (DefaultSampler), so 1 of its items is trained twice a pass; '
            "batch_sampler=dict(type='GlobalBatchSampler') (languages mixed) or "
            "dict(type='LanguageBatchSampler') reads global batches without padding"][:warned]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize('batching', ['mixed', 'one_language', 'global_odd'])
def test_two_gloo_processes_match_one_process_with_the_global_batch(tmp_path, monkeypatch,
                                                                    batching):
    """With one language a batch too: the two processes' batches of a step are the halves of
    the one process's batch (one language), so the gathered InfoNCE sees the same batch. And
    with global batches of a pass of 19 pairs: MMEngine's DefaultSampler pads it to 20 with
    its first pair, which each pass then trained twice (weights 4e-2 from one process's)."""
    MODELS.import_from_location()  # every module of xmr, for the forked children to reuse
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    # fork: the children reuse this process's imports (spawn would re-import for seconds).
    mp.start_processes(_worker, args=(free_port(), str(tmp_path / 'ddp'), str(tmp_path),
                                      batching),
                       nprocs=WORLD, join=True, start_method='fork')
    single = Runner.from_cfg(make_cfg(tmp_path / 'single', GLOBAL_BATCH, batching))
    initial = trained_state(single)
    single.train()
    expected = trained_state(single)
    ranks = [torch.load(tmp_path / f'rank{r}.pt') for r in range(WORLD)]
    assert set(ranks[0]['state']) == set(expected)
    assert not torch.equal(expected['backbone.clip.text_projection'],
                           initial['backbone.clip.text_projection'])
    # One language a batch: a few weights differ by rounding, 4e-5 at most (AdamW's first
    # steps scale an element's tiny gradient to a full step); batches of two languages dealt to
    # the ranks differ by 4e-2.
    atol = 1e-5 if batching == 'mixed' else 1e-4
    for rank in ranks:
        assert rank['wrappers'] == len(PHASES)  # a fresh DDP wrapper per phase
        # Each phase's wrapper all-reduces exactly what the phase trains (the runner's first
        # wrapper, built before any phase froze anything, held every parameter): the text
        # projection (frozen in the first phase) joins the second's, the first's embedding
        # leaves it.
        assert rank['synced'][-len(PHASES):] == rank['trained']
        assert ['backbone.clip.text_projection' in synced
                for synced in rank['synced'][-len(PHASES):]] == [False, True]
        assert [any(n.startswith('language_branch.embedding') for n in synced)
                for synced in rank['synced'][-len(PHASES):]] == [True, False]
        for name, value in expected.items():
            torch.testing.assert_close(rank['state'][name], value, rtol=1e-4, atol=atol,
                                       msg=name)


@pytest.mark.slow
def test_two_gloo_processes_train_dasd_s_compiled_losses_as_its_eager_ones(tmp_path,
                                                                          monkeypatch):
    MODELS.import_from_location()
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    # AOTAutograd's graphs run eagerly: what Inductor would compile, at test speed.
    for compile in (None, dict(backend='aot_eager')):
        mp.start_processes(_dasd_worker, args=(free_port(), str(tmp_path / str(bool(compile))),
                                               str(tmp_path), compile),
                           nprocs=WORLD, join=True, start_method='fork')
    for rank in range(WORLD):
        eager = torch.load(tmp_path / f'rank{rank}_eager.pt')
        compiled = torch.load(tmp_path / f'rank{rank}_compiled.pt')
        # AdamW (lr 1e-2) moves a weight whose gradient is near zero by a share of lr that
        # the gradient's last digits decide, so summation order shows there as a share of lr:
        # one of the SDM head's 1,024 weights moved 2.9e-4 apart on one host (the rest within
        # 4e-6), where the earlier atol of 1e-4 had held on another.
        for name, value in eager['state'].items():
            torch.testing.assert_close(compiled['state'][name], value, rtol=1e-3, atol=5e-4,
                                       msg=name)
        # The cross-modal phase's InfoNCE gathers the global batch: the ranks' row counts are
        # read on the host once per gather, outside the graphs; nothing else breaks them.
        assert compiled['breaks'] and all('shard_shapes' in reason
                                          for reason in compiled['breaks'])
        # One compilation a phase: the second's other losses fail the first's guards, and
        # nothing else (a rank's shard, a step's values) makes the code again.
        assert compiled['recompiles'] == 1, compiled['reasons']
        assert 'self.loss_weights' in compiled['reasons'][0]


def test_phase_wrapper_defaults_and_cpu_launcher_checks(monkeypatch):
    default = phase_wrapper_cfg(None, on_cuda=False)
    assert default['type'] == 'MMDistributedDataParallel' and default['device_ids'] is None
    assert default['find_unused_parameters'] is True
    # The name this torch's DDP takes: given the old one, a newer torch warns at every phase's
    # wrap and leaves the buffers unsynced at wrap time.
    takes = inspect.signature(DistributedDataParallel.__init__).parameters
    name = 'forward_sync_buffers' if 'forward_sync_buffers' in takes else 'broadcast_buffers'
    assert {key: default[key] for key in ('forward_sync_buffers', 'broadcast_buffers')
            if key in default} == {name: False}
    assert phase_wrapper_cfg(dict(find_unused_parameters=False), on_cuda=False)[
        'find_unused_parameters'] is False
    cfg = Config(dict())
    setup_cpu_distributed(cfg, 'none')
    assert 'model_wrapper_cfg' not in cfg
    monkeypatch.delenv('RANK', raising=False)
    with pytest.raises(UserError, match=(
            '--launcher pytorch: RANK is not set: no pytorch launcher started this process: '
            'start it with tools/dist_train.sh CONFIG NUM_PROCESSES')):
        setup_cpu_distributed(cfg, 'pytorch')
    monkeypatch.delenv('SLURM_PROCID', raising=False)
    with pytest.raises(UserError, match=(
            '--launcher slurm: SLURM_PROCID is not set: no slurm launcher started this process: '
            'start it with tools/slurm_train.sh PARTITION JOB_NAME CONFIG')):
        setup_cpu_distributed(cfg, 'slurm')
    monkeypatch.setenv('SLURM_PROCID', '0')
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="use the 'pytorch' launcher"):
            setup_cpu_distributed(cfg, 'slurm')


@pytest.mark.parametrize('name', ['forward_sync_buffers', 'broadcast_buffers'])
def test_a_run_s_own_buffer_sync_wins_over_the_phase_default(name):
    """A model whose buffers change in training asks DDP to sync them before each forward, by
    either name: given MMEngine's broadcast_buffers=True beside xmr's forward_sync_buffers=False,
    torch's DDP ignored the old name and synced nothing."""
    built = phase_wrapper_cfg({name: True}, on_cuda=False)
    assert built[name] is True
    assert {key: built[key] for key in ('forward_sync_buffers', 'broadcast_buffers')
            if key in built} == {name: True}


def test_a_gpu_phase_is_wrapped_on_its_local_device_not_its_global_rank(monkeypatch):
    """The second node's first process: global rank 4, its node's GPU 0."""
    monkeypatch.setenv('RANK', '4')
    monkeypatch.setenv('LOCAL_RANK', '0')
    assert phase_wrapper_cfg(None, on_cuda=True)['device_ids'] == [0]


@pytest.fixture
def cpu_group_started(monkeypatch):
    """A CPU machine whose gloo group a driver script started before the runner: a second
    ``init_process_group`` fails."""
    def started_twice(*args, **kwargs):
        raise RuntimeError('trying to initialize the default process group twice')

    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(distributed.dist, 'is_initialized', lambda: True)
    monkeypatch.setattr(distributed.dist, 'init_process_group', started_twice)
    monkeypatch.setenv('RANK', '0')


def test_a_cpu_run_whose_group_is_started_already_is_not_started_again(cpu_group_started):
    cfg = Config(dict())
    setup_cpu_distributed(cfg, 'pytorch')
    assert cfg.model_wrapper_cfg.device_ids is None


@pytest.mark.parametrize('env_cfg', [None, {}, dict(dist_cfg=dict(backend='nccl', timeout=60))],
                         ids=['no_env_cfg', 'no_dist_cfg', 'nccl'])
def test_a_cpu_run_s_config_records_the_gloo_backend_it_runs_on(cpu_group_started, env_cfg):
    """The config the runner dumps says gloo, whatever the config gave (its other options
    kept): a config without ``env_cfg.dist_cfg`` lost the backend."""
    cfg = Config(dict() if env_cfg is None else dict(env_cfg=env_cfg))
    setup_cpu_distributed(cfg, 'pytorch')
    assert cfg.env_cfg.dist_cfg.backend == 'gloo'
    if env_cfg:
        assert cfg.env_cfg.dist_cfg.timeout == 60


@pytest.mark.parametrize('launcher, started', [('none', []), ('pytorch', [(
    'pytorch', dict(backend='nccl', timeout=60))])])
def test_a_tool_without_a_runner_starts_the_group_the_runner_would(monkeypatch, launcher,
                                                                   started):
    """``tools/cache_features.py`` on a CUDA machine: MMEngine's ``init_dist`` with the
    config's ``dist_cfg`` (which puts each process on its local GPU), as the runner calls it."""
    calls = []
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(distributed.dist, 'is_initialized', lambda: False)
    monkeypatch.setattr(distributed, 'init_dist',
                        lambda launcher, **kwargs: calls.append((launcher, kwargs)))
    monkeypatch.setenv('RANK', '0')
    distributed.start_distributed(
        Config(dict(env_cfg=dict(dist_cfg=dict(backend='nccl', timeout=60)))), launcher)
    assert calls == started


def test_a_cuda_machine_keeps_the_configured_backend_and_wrapper(monkeypatch):
    """``setup_cpu_distributed`` changes nothing where CUDA is there, whatever the launcher."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setenv('RANK', '0')
    monkeypatch.setenv('SLURM_PROCID', '0')
    for launcher in ('pytorch', 'slurm'):
        cfg = Config(dict(env_cfg=dict(dist_cfg=dict(backend='nccl'))))
        setup_cpu_distributed(cfg, launcher)
        assert cfg.env_cfg.dist_cfg.backend == 'nccl' and 'model_wrapper_cfg' not in cfg


class _SparseModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(4, 2, sparse=True)
        self.head = torch.nn.Linear(2, 2)


@pytest.mark.parametrize('backend, trains_embedding, refused', [
    ('nccl', True, True), ('nccl', False, False), ('gloo', True, False)])
def test_a_trained_sparse_embedding_is_refused_on_a_backend_without_sparse_all_reduce(
        monkeypatch, backend, trains_embedding, refused):
    built = []
    monkeypatch.setattr(distributed.dist, 'get_backend', lambda: backend)
    monkeypatch.setattr(distributed.MODEL_WRAPPERS, 'build',
                        lambda cfg, default_args: built.append(default_args['module']))
    model = _SparseModel()
    model.embedding.weight.requires_grad_(trains_embedding)
    runner = SimpleNamespace(distributed=True, model=model, cfg=Config(dict()))
    if refused:
        with pytest.raises(ValueError, match='embedding.weight has sparse gradients, which the '
                                             'nccl backend cannot all-reduce'):
            distributed.rewrap_for_phase(runner)
        assert not built
    else:
        distributed.rewrap_for_phase(runner)
        assert built == [model]


def test_a_process_torchrun_started_without_a_launcher_is_refused(monkeypatch):
    """``torchrun tools/train.py CONFIG`` without ``--launcher pytorch``: each process would
    run alone, all into one work dir (the second refused by the first's lock as 'another
    training run'; a test writing its result twice)."""
    monkeypatch.setenv('RANK', '1')
    monkeypatch.setenv('WORLD_SIZE', '2')
    with pytest.raises(UserError, match=(
            '--launcher none: torchrun started this process as rank 1 of 2, and without a '
            'launcher each process runs alone: add --launcher pytorch')):
        setup_cpu_distributed(Config(dict()), 'none')
    monkeypatch.setenv('WORLD_SIZE', '1')  # torchrun with one process: a run of its own
    setup_cpu_distributed(Config(dict()), 'none')


@pytest.mark.parametrize('dist_cfg, timeout', [(dict(timeout=3600), timedelta(hours=1)),
                                               (dict(backend='nccl'), None)],
                         ids=['timeout', 'default'])
def test_a_cpu_run_s_group_takes_the_configured_timeout(monkeypatch, dist_cfg, timeout):
    """A feature cache that rank 0 builds for longer than gloo's 30 minutes stops the ranks
    waiting for it: ``env_cfg.dist_cfg.timeout`` (seconds, MMEngine's key) raises the limit on
    CPUs as on GPUs, where MMEngine starts the group."""
    started = []
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(distributed.dist, 'is_initialized', lambda: False)
    monkeypatch.setattr(distributed.dist, 'init_process_group',
                        lambda backend, **kwargs: started.append(kwargs))
    monkeypatch.setenv('RANK', '0')
    monkeypatch.setenv('WORLD_SIZE', '2')
    setup_cpu_distributed(Config(dict(env_cfg=dict(dist_cfg=dist_cfg))), 'pytorch')
    assert started[0].get('timeout') == timeout
    with pytest.raises(UserError, match=r"^env_cfg.dist_cfg.timeout='1h': not a number of "
                                        'seconds: give a positive number'):
        setup_cpu_distributed(Config(dict(env_cfg=dict(dist_cfg=dict(timeout='1h')))),
                              'pytorch')
    with pytest.raises(UserError, match=r'^env_cfg.dist_cfg.timeout=0: not a number of seconds'):
        setup_cpu_distributed(Config(dict(env_cfg=dict(dist_cfg=dict(timeout=0)))), 'pytorch')
