"""The tools choose torch's CPU thread count: environment, then config, then the cores."""
from __future__ import annotations

import pytest
import torch
from mmengine.config import Config

from xmr.engine import threads
from xmr.engine.threads import choose_cpu_threads, set_cpu_threads
from xmr.utils.cli import UserError


@pytest.fixture
def cores(monkeypatch):
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    monkeypatch.delenv('LOCAL_WORLD_SIZE', raising=False)

    def set_cores(count):
        monkeypatch.setattr(threads, 'available_cores', lambda: count)
    return set_cores


@pytest.mark.parametrize('count, processes, expected', [(2, 1, 1), (1, 1, 1), (16, 1, 15),
                                                        (16, 4, 3), (2, 2, 1), (10, 4, 1)])
def test_automatic_count_leaves_a_core_and_shares_among_local_processes(cores, count, processes,
                                                                       expected):
    cores(count)
    assert choose_cpu_threads(None, processes)[0] == expected


def test_the_environment_wins_over_the_config_which_wins_over_the_cores(cores, monkeypatch):
    cores(16)
    assert choose_cpu_threads(4) == (4, 'cpu_threads in the config')
    monkeypatch.setenv('OMP_NUM_THREADS', '2')
    assert choose_cpu_threads(4) == (2, 'OMP_NUM_THREADS')


@pytest.mark.parametrize('env, configured, where', [('abc', None, 'OMP_NUM_THREADS'),
                                                    ('', 0, 'cpu_threads'),
                                                    ('', 1.5, 'cpu_threads')])
def test_bad_counts_name_their_source(cores, monkeypatch, env, configured, where):
    cores(2)
    monkeypatch.setenv('OMP_NUM_THREADS', env)
    with pytest.raises(UserError, match=f'^{where}: .* is not a number of threads: give a '
                       'positive integer'):
        choose_cpu_threads(configured)


def test_set_cpu_threads_applies_the_choice(cores):
    cores(4)
    before = torch.get_num_threads()
    try:
        assert set_cpu_threads(Config(dict(cpu_threads=None))) == 3
        assert torch.get_num_threads() == 3
        assert set_cpu_threads(Config(dict(cpu_threads=1))) == 1
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_torchrun_s_one_thread_is_not_taken_for_the_user_s_word(cores, monkeypatch):
    """tools/dist_train.sh's caller set no OMP_NUM_THREADS: the 1 that torchrun puts in every
    process it starts (two a node here) gives way to the config, then to a share of the cores
    (16 cores for 2 processes: 8, less one)."""
    cores(16)
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    monkeypatch.setenv(threads.CALLER_SET_NO_OMP, '1')
    assert choose_cpu_threads(None, 2)[0] == 7
    assert choose_cpu_threads(4, 2) == (4, 'cpu_threads in the config')


def test_the_cores_are_those_the_affinity_mask_allows_not_the_machine_s(monkeypatch):
    # taskset / a container's cpuset: 2 of the machine's 64 cores.
    monkeypatch.setattr(threads.os, 'sched_getaffinity', lambda pid: {0, 5}, raising=False)
    monkeypatch.setattr(threads.os, 'cpu_count', lambda: 64)
    assert threads.available_cores() == 2


def test_set_cpu_threads_shares_the_cores_among_torchrun_s_local_processes(cores, monkeypatch):
    cores(16)
    monkeypatch.setenv('LOCAL_WORLD_SIZE', '4')  # 4 cores each, less one
    before = torch.get_num_threads()
    try:
        assert set_cpu_threads(Config(dict(cpu_threads=None))) == 3
    finally:
        torch.set_num_threads(before)


def test_a_bad_cpu_threads_is_refused_where_the_environment_sets_the_count_too(cores,
                                                                               monkeypatch):
    """It passed where a launcher set OMP_NUM_THREADS, and stopped the same config's run on
    a machine without it."""
    cores(2)
    monkeypatch.setenv('OMP_NUM_THREADS', '2')
    with pytest.raises(UserError, match="^cpu_threads: 'four' is not a number of threads"):
        choose_cpu_threads('four')
