"""RNGStateHook: each rank's streams saved in rank order, each rank's own handed back."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from xmr.engine.hooks import rng_state
from xmr.engine.hooks.rng_state import RNGStateHook


def resumed_state(monkeypatch, saved, rank: int, world: int):
    monkeypatch.setattr(rng_state, 'get_rank', lambda: rank)
    monkeypatch.setattr(rng_state, 'get_world_size', lambda: world)
    runner = SimpleNamespace(_train_loop=SimpleNamespace(pending_rng_state=None))
    RNGStateHook().after_load_checkpoint(runner, dict(rng_state=saved))
    return runner._train_loop.pending_rng_state


def test_a_checkpoint_holds_what_every_rank_gathered_else_this_processs_streams(monkeypatch):
    hook = RNGStateHook()
    monkeypatch.setattr(rng_state, 'every_rank_rng_state', lambda: ['rank 0', 'rank 1'])
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
    runner = SimpleNamespace(_train_loop=SimpleNamespace(pending_rng_state=None))
    RNGStateHook().after_load_checkpoint(runner, dict(meta=dict(iter=7)))
    assert runner._train_loop.pending_rng_state is None


@pytest.mark.parametrize('loop', [None, dict(type='PhasedTrainLoop')])
def test_a_checkpoint_loaded_before_the_train_loop_is_built_hands_no_streams(loop):
    # runner.test() with load_from: the train loop is still its config, or None.
    runner = SimpleNamespace(_train_loop=loop)
    RNGStateHook().after_load_checkpoint(runner, dict(rng_state=['s0']))
    assert runner._train_loop == loop


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
