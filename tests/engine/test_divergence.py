"""The divergence monitor's pieces: which terms are non-finite, the patience, the ranks' vote."""
import math

import pytest
import torch

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
