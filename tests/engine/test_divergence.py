"""The divergence monitor's pieces: which terms are non-finite, the patience, the ranks' vote."""
import math
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.engine.test_distributed import free_port
from xmr.engine import divergence
from xmr.engine.divergence import DivergenceMonitor, nonfinite_terms


def test_nonfinite_terms_read_the_logged_scalars_only():
    """Outputs may carry non-scalar tensors (embeddings) beside the losses: they are skipped."""
    terms = nonfinite_terms(dict(loss=torch.tensor(1.0), loss_cm=torch.tensor([math.inf]),
                                 embeddings=torch.full((2, 2), math.nan), note='text'))
    assert terms == {'loss_cm': math.inf}


def test_a_boolean_patience_is_refused():
    with pytest.raises(ValueError, match='nonfinite_patience must be an integer >= 0, got True'):
        DivergenceMonitor(True)


def test_a_nan_on_another_rank_stops_this_one_at_the_same_iteration(monkeypatch):
    """The ranks vote (max over ranks): a finite loss here, a NaN on another rank, counts."""
    def all_reduce(tensor, op=None, group=None):
        tensor.fill_(1)  # another rank saw a non-finite loss

    monkeypatch.setattr(divergence, 'is_distributed', lambda: True)
    monkeypatch.setattr(divergence, 'host_group', lambda: None)
    monkeypatch.setattr(divergence.dist, 'all_reduce', all_reduce)
    monitor = DivergenceMonitor(patience=1)
    assert monitor.check(dict(loss=torch.tensor(1.0)), 'cross_modal', 3) is False
    with pytest.raises(divergence.TrainingDivergedError, match=r'at iteration 4 \(on another '
                                                               r'rank\), 2 iteration\(s\)'):
        monitor.check(dict(loss=torch.tensor(1.0)), 'cross_modal', 4)


def _max_over_two_ranks(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=2)
    # A signal number seen on rank 0 only (PreemptionHook's use), and a flag raised on rank 1.
    agreed = dict(largest=divergence.max_over_ranks((15, 0)[rank]),
                  mixed=divergence.max_over_ranks((3, 7)[rank]),
                  any_flag=divergence.on_any_rank(rank == 1),
                  no_flag=divergence.on_any_rank(False))
    torch.save(agreed, Path(out_dir) / f'rank{rank}.pt')
    dist.destroy_process_group()


def test_every_rank_agrees_on_the_largest_value_not_their_sum(tmp_path):
    """Two gloo processes: 15 and 0 agree on 15, 3 and 7 on 7 (a sum would give 10)."""
    assert divergence.max_over_ranks(9) == 9  # one process: the value itself
    mp.start_processes(_max_over_two_ranks, args=(free_port(), str(tmp_path)), nprocs=2,
                       join=True, start_method='fork')
    for rank in range(2):
        assert torch.load(tmp_path / f'rank{rank}.pt') == dict(
            largest=15, mixed=7, any_flag=True, no_flag=False), rank


def test_a_phase_may_not_end_in_even_one_nonfinite_iteration():
    monitor = DivergenceMonitor(patience=1)
    monitor.check(dict(loss=torch.tensor(1.0)), 'cross_modal', 1)
    monitor.check_phase_end('cross_modal')  # a finite last iteration ends the phase
    assert monitor.check(dict(loss=torch.tensor(math.nan)), 'cross_modal', 2) is False
    with pytest.raises(divergence.TrainingDivergedError,
                       match=r'phase cross_modal ended with 1 non-finite iteration\(s\) in a row'):
        monitor.check_phase_end('cross_modal')
