"""RNGStateHook: each rank's streams saved in rank order, each rank's own handed back."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.engine.hooks.test_phase_report_hook import report_cfg
from tests.engine.test_loops import PHASES, make_cfg, train
from xmr.engine.hooks import rng_state
from xmr.engine.hooks.rng_state import RNGStateHook


def resumed_state(monkeypatch, saved, rank: int, world: int):
    monkeypatch.setattr(rng_state, 'get_rank', lambda: rank)
    monkeypatch.setattr(rng_state, 'get_world_size', lambda: world)
    runner = SimpleNamespace(_train_loop=SimpleNamespace(pending_rng_state=None), _resume=True)
    RNGStateHook().after_load_checkpoint(runner, dict(rng_state=saved))
    return runner._train_loop.pending_rng_state


def test_a_checkpoint_holds_what_every_rank_gathered_else_this_processs_streams(monkeypatch):
    hook = RNGStateHook()
    monkeypatch.setattr(rng_state, 'every_rank_rng_state',
                        lambda state=None: ['rank 0', 'rank 1'])
    monkeypatch.setattr(rng_state, 'capture_rng_state', lambda: 'this process')
    hook.before_checkpoint_on_every_rank(runner=None)
    gathered, alone = {}, {}
    hook.before_save_checkpoint(None, gathered)
    hook.before_save_checkpoint(None, alone)  # a best checkpoint: nothing gathered for it
    assert (gathered['rng_state'], alone['rng_state']) == (['rank 0', 'rank 1'], ['this process'])


@pytest.mark.parametrize('saved, rank, world, expected', [
    (['s0', 's1'], 1, 2, 's1'),            # the rank's own
    (['s0', 's1'], 0, 1, 's0'),            # fewer ranks than wrote it: rank 0's
    (['s0'], 1, 2, 's0'),                  # a best checkpoint, or one of a single process
    (['s0', 's1', 's2'], 1, 2, 's0'),      # more ranks than this run: rank 0's, for each rank
    ({'torch': 'old'}, 1, 2, {'torch': 'old'}),  # an earlier xmr's: one state, not a list
])
def test_each_rank_resumes_its_own_streams_or_rank_0s(monkeypatch, saved, rank, world,
                                                      expected):
    assert resumed_state(monkeypatch, saved, rank, world) == expected


def test_a_checkpoint_without_random_states_leaves_the_loops_streams_alone():
    runner = SimpleNamespace(_train_loop=SimpleNamespace(pending_rng_state=None), _resume=True)
    RNGStateHook().after_load_checkpoint(runner, dict(meta=dict(iter=7)))
    assert runner._train_loop.pending_rng_state is None


@pytest.mark.parametrize('loop', [None, dict(type='PhasedTrainLoop')])
def test_a_checkpoint_loaded_before_the_train_loop_is_built_hands_no_streams(loop):
    # runner.test() with load_from: the train loop is still its config, or None.
    runner = SimpleNamespace(_train_loop=loop, _resume=False)
    RNGStateHook().after_load_checkpoint(runner, dict(rng_state=['s0']))
    assert runner._train_loop == loop


def test_a_run_loaded_from_a_checkpoint_draws_from_its_own_seed(tmp_path):
    """load_from without resume handed the checkpoint's streams to the loop, which restored
    them at its first phase: runs of other seeds drew alike."""
    train(make_cfg(tmp_path / 'source', phases=[dict(PHASES[0], iters=1)], checkpoint_interval=1))
    draws = {}
    for seed in (1, 2):
        cfg = make_cfg(tmp_path / f'seed_{seed}', phases=[dict(PHASES[1], iters=2)])
        cfg.update(load_from=str(tmp_path / 'source' / 'iter_1.pth'), randomness=dict(seed=seed))
        draws[seed] = [record['draw'] for record in train(cfg)[1]]
    assert draws[1] != draws[2]


@pytest.mark.parametrize('resume, expected', [(True, 's0'), (False, None)])
def test_only_a_resumed_run_takes_the_checkpoints_streams(resume, expected):
    runner = SimpleNamespace(_train_loop=SimpleNamespace(pending_rng_state=None), _resume=resume)
    RNGStateHook().after_load_checkpoint(runner, dict(rng_state=['s0']))
    assert runner._train_loop.pending_rng_state == expected


def test_only_a_run_of_several_ranks_unlike_the_checkpoints_is_told_rank_0s_streams_go_on(
        monkeypatch):
    said = []
    monkeypatch.setattr(rng_state, 'print_log',
                        lambda message, **kwargs: said.append((message, kwargs['level'])))
    resumed_state(monkeypatch, ['s0', 's1'], 1, 2)
    resumed_state(monkeypatch, ['s0', 's1'], 0, 1)  # one process goes on as rank 0 did
    assert said == []
    resumed_state(monkeypatch, ['s0'], 1, 2)
    assert said == [("the checkpoint holds the random states of 1 rank(s), this run has 2: "
                     "every rank continues from rank 0's", 30)]


def test_a_checkpoint_written_during_a_validation_holds_the_training_streams(tmp_path):
    """A validation's first best makes MMEngine write the periodic checkpoint of its iteration
    again (to record the best), while the validation runs and its loader draws from torch's
    stream: a run resumed from that file draws what the uninterrupted run drew."""
    def cfg(work_dir, **kwargs):
        cfg = report_cfg(work_dir, checkpoint_interval=4, **kwargs)
        cfg.default_hooks.checkpoint.update(save_best='mAR', rule='greater')
        return cfg

    torch.manual_seed(0)
    _, uninterrupted = train(cfg(tmp_path / 'whole'))
    torch.manual_seed(0)
    train(cfg(tmp_path / 'cut', stop_after=5))  # iter_4.pth written again after validating
    _, resumed = train(cfg(tmp_path / 'cut', resume_from=tmp_path / 'cut' / 'iter_4.pth'))
    assert [r['draw'] for r in resumed] == [r['draw'] for r in uninterrupted[4:]]


def test_what_a_validation_draws_stays_out_of_the_checkpoints_written_during_it():
    hook = RNGStateHook()
    torch.manual_seed(5)
    training = torch.get_rng_state()
    hook.before_val(runner=None)
    torch.rand(3)  # the validation's loader draws its seed
    hook.before_checkpoint_on_every_rank(runner=None)  # a periodic checkpoint written again
    periodic, best = {}, {}
    hook.before_save_checkpoint(None, periodic)
    hook.before_save_checkpoint(None, best)
    hook.after_val(runner=None)
    assert torch.equal(periodic['rng_state'][0]['torch'], training)
    assert torch.equal(best['rng_state'][0]['torch'], training)
    after = {}
    hook.before_save_checkpoint(None, after)  # training again: its streams as they are
    assert torch.equal(after['rng_state'][0]['torch'], torch.get_rng_state())
