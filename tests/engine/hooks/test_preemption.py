"""PreemptionHook: a SIGTERM that lands while the ranks exchange their signals is not lost."""
from __future__ import annotations

import os
import signal

import torch

from tests.engine.test_loops import PHASES, make_cfg, train
from xmr.engine.hooks import preemption


def test_a_signal_landing_during_the_exchange_stops_the_run_one_iteration_later(
        tmp_path, monkeypatch):
    """The exchange's answer (no rank had a signal when it started) must not erase a signal
    that landed while it ran: that one is exchanged, and acted on, at the next iteration."""
    exchange = preemption.max_over_ranks
    exchanged = []

    def signal_lands_during_the_exchange(value: int) -> int:
        agreed = exchange(value)
        exchanged.append(value)
        if len(exchanged) == 2:  # after iteration 2, while this rank waits for the others
            os.kill(os.getpid(), signal.SIGTERM)
        return agreed

    monkeypatch.setattr(preemption, 'max_over_ranks', signal_lands_during_the_exchange)
    cfg = make_cfg(tmp_path, phases=PHASES[1:2])  # 8 iterations
    cfg.custom_hooks.append(dict(type='PreemptionHook'))
    torch.manual_seed(0)
    _, records = train(cfg)
    assert exchanged == [0, 0, signal.SIGTERM]
    assert len(records) == 3  # stopped after iteration 3, the one after the signal
    assert (tmp_path / 'iter_3.pth').is_file()
