"""``EarlyStoppingHook`` resumed: a checkpoint carries its best score and patience count."""
from __future__ import annotations

import pytest
import torch
from mmengine.runner import ValLoop

from tests.engine.test_loops import make_cfg, train, with_validation
from tests.engine.test_phase_best import TWO_PHASES, branch, equal, scripted  # noqa: F401
from xmr.engine.hooks import EarlyStoppingHook

# Validated at 2, 4, ..., 12: the best at 4, then two validations 0.1 or more below it stop
# the run at 8 (patience 2), where the cross_lingual phase ends.
SCORES = {2: 1.0, 4: 5.0, 6: 3.0, 8: 2.0, 10: 1.0, 12: 1.0}


@pytest.fixture
def scored(scripted, monkeypatch):  # noqa: F811 (the imported fixture)
    """``scripted``'s validations, handed to the early-stopping hook as a validation does."""
    run = ValLoop.run

    def run_and_decide(loop):
        metrics = run(loop)
        for hook in loop.runner.hooks:
            if isinstance(hook, EarlyStoppingHook):
                hook.after_val_epoch(loop.runner, metrics)
        return metrics

    monkeypatch.setattr(ValLoop, 'run', run_and_decide)
    return scripted


def stopping_cfg(work_dir, **options):
    cfg = with_validation(make_cfg(work_dir, phases=TWO_PHASES, checkpoint_interval=2,
                                   **options))
    cfg.custom_hooks.append(dict(type='EarlyStoppingHook', monitor='mAR', rule='greater',
                                 patience=2))
    return cfg


def test_a_run_resumed_before_the_stop_stops_where_the_uninterrupted_run_does(tmp_path, scored):
    """Cut after iteration 7, resumed from its checkpoint at 6 (written before the validation
    at 6): MMEngine's hook restarted with no best and stopped at 10, two steps later."""
    scored['scores'].update(SCORES)
    torch.manual_seed(0)
    whole, _ = train(stopping_cfg(tmp_path / 'whole'))
    assert whole.iter == 8
    torch.manual_seed(0)
    train(stopping_cfg(tmp_path / 'cut', stop_after=7))
    resumed, _ = train(stopping_cfg(tmp_path / 'cut', resume_from=tmp_path / 'cut' / 'iter_6.pth'))
    assert resumed.iter == 8
    assert equal(branch(resumed), branch(whole))


def test_a_run_that_stopped_trains_nothing_more_when_requeued(tmp_path, scored):
    """The stopped run's last checkpoint, at 8, was written before the validation that
    stopped it; resumed, that validation is made up and stops it again."""
    scored['scores'].update(SCORES)
    torch.manual_seed(0)
    whole, _ = train(stopping_cfg(tmp_path / 'whole'))
    again, _ = train(stopping_cfg(tmp_path / 'again',
                                  resume_from=tmp_path / 'whole' / 'iter_8.pth'))
    assert again.iter == 8
    assert equal(branch(again), branch(whole))


def test_a_run_of_several_phases_is_told_a_stop_ends_them_all(tmp_path, scored):
    """The stop at 8 above ends cross_lingual and with it the run: cross_modal never trains,
    which nothing said before the hours of training that led to it."""
    scored['scores'].update(SCORES)
    runner, _ = train(stopping_cfg(tmp_path / 'run'))
    logged = (tmp_path / 'run' / runner.timestamp / f'{runner.timestamp}.log').read_text()
    assert ("EarlyStoppingHook('mAR') stops the whole run: a stop in phase cross_lingual "
            "leaves ['cross_modal'] untrained") in logged
    assert runner.iter == 8


def test_only_a_resumed_run_of_the_same_monitor_takes_the_state_up():
    saved = EarlyStoppingHook(monitor='mAR', rule='greater')
    saved.best_score, saved.wait_count = 5.0, 1
    checkpoint = {}
    saved.before_save_checkpoint(None, checkpoint)
    for resume, monitor, taken in [(True, 'mAR', True), (False, 'mAR', False),
                                   (True, 'en/AR', False)]:
        hook = EarlyStoppingHook(monitor=monitor, rule='greater')
        hook.after_load_checkpoint(type('Runner', (), {'_resume': resume}), checkpoint)
        assert (hook.best_score, hook.wait_count) == ((5.0, 1) if taken else (-float('inf'), 0))
