"""CorruptMediaHook: counts and names of skipped media per epoch, validation and test."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from mmengine.hooks import Hook
from mmengine.runner import Runner

from tests.engine.test_loop_faults import PoisonedIteration
from tests.engine.test_loops import PHASES, make_cfg
from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
from xmr.engine.divergence import TrainingDivergedError
from xmr.engine.hooks.corrupt_media import CorruptMediaHook
from xmr.engine.runner import ResumeCheckedRunner
from xmr.registry import HOOKS


class _Logger:
    def __init__(self):
        self.warnings: list[str] = []

    def warning(self, message: str) -> None:
        self.warnings.append(message)


def _runner(epoch=0, iteration=0):
    return SimpleNamespace(logger=_Logger(), epoch=epoch, iter=iteration)


def train_iter(hook: CorruptMediaHook, runner, batch_idx: int, data_batch) -> None:
    """The hook's points of one finite training iteration, as the train loop calls them."""
    hook.before_train_iter(runner, batch_idx, data_batch)
    hook.after_train_iter(runner, batch_idx, data_batch)


def test_train_epoch_report_counts_every_skip_and_resets():
    hook = HOOKS.build(dict(type='CorruptMediaHook', interval=0))
    runner = _runner(epoch=2)
    batches = [{'batch_size': 3, 'skipped_media': ['/v/b.mp4']}, {'batch_size': 4},
               {'batch_size': 2, 'skipped_media': ['/v/a.mp4', '/v/b.mp4']}]
    for i, batch in enumerate(batches):
        train_iter(hook, runner, i, batch)
    hook.after_train_epoch(runner)
    assert runner.logger.warnings == [
        'train epoch 3: 3 unreadable media skipped (2 files): /v/a.mp4, /v/b.mp4 (x2)']
    hook.after_train_epoch(runner)
    assert len(runner.logger.warnings) == 1


def test_validation_and_test_are_reported_apart():
    hook = CorruptMediaHook(max_names=1)
    runner = _runner()
    hook.after_val_iter(runner, 0, {'skipped_media': ['/v/x.mp4', '/v/y.mp4']})
    hook.after_test_iter(runner, 0, {'skipped_media': ['/v/z.mp4']})
    hook.after_val_epoch(runner, {})
    hook.after_test_epoch(runner, {})
    assert runner.logger.warnings == [
        'validation: 2 unreadable media skipped (2 files): /v/x.mp4 and 1 more',
        'test: 1 unreadable media skipped (1 file): /v/z.mp4']


def test_iteration_interval_reports_long_phases():
    hook = CorruptMediaHook(interval=2)
    runner = _runner(iteration=0)
    train_iter(hook, runner, 0, {'skipped_media': ['/v/a.mp4']})
    assert runner.logger.warnings == []
    runner.iter = 1
    train_iter(hook, runner, 1, {'batch_size': 8})
    assert runner.logger.warnings == [
        'train up to iteration 2: 1 unreadable media skipped (1 file): /v/a.mp4']


@pytest.mark.parametrize('settings', [dict(interval=-1), dict(max_names=-1)])
def test_negative_settings_are_rejected(settings):
    with pytest.raises(ValueError, match='must be >= 0'):
        CorruptMediaHook(**settings)


def test_a_batch_that_is_no_dict_counts_nothing():
    """A loader yielding tuples or lists (no 'skipped_media' key) passes through unnoticed."""
    hook = CorruptMediaHook(interval=1)
    runner = _runner()
    train_iter(hook, runner, 0, ([1, 2], [3, 4]))
    hook.after_val_iter(runner, 0, [{'skipped_media': ['/v/a.mp4']}])
    hook.after_train_epoch(runner)
    hook.after_val_epoch(runner)
    assert runner.logger.warnings == []


def test_under_ddp_a_report_counts_the_files_of_every_rank(monkeypatch):
    """Rank 0 writes the log: it reports what rank 1 skipped too (all_gather_object)."""
    other_rank = {'/v/b.mp4': 1, '/v/c.mp4': 2}
    monkeypatch.setattr('xmr.engine.hooks.corrupt_media.all_gather_object',
                        lambda mine, group=None: [mine, other_rank])
    hook = CorruptMediaHook(interval=0)
    runner = _runner()
    train_iter(hook, runner, 0, {'batch_size': 2, 'skipped_media': ['/v/a.mp4', '/v/b.mp4']})
    hook.after_train_epoch(runner)
    assert runner.logger.warnings == [
        'train epoch 1: 5 unreadable media skipped (3 files): /v/a.mp4, /v/b.mp4 (x2), '
        '/v/c.mp4 (x2)']
    # This rank's counts were reset by the report: the next one holds rank 1's files alone.
    hook.after_train_epoch(runner)
    assert runner.logger.warnings[1] == ('train epoch 1: 3 unreadable media skipped (2 files): '
                                         '/v/b.mp4, /v/c.mp4 (x2)')


@pytest.mark.parametrize('mode, scope', [('val', 'validation'), ('test', 'test')])
def test_an_evaluation_counts_a_file_once_where_the_sampler_padded_a_rank_with_it(
        monkeypatch, mode, scope):
    """Three items on two ranks: MMEngine's DefaultSampler pads rank 1's shard with item 0,
    whose file is unreadable, so both ranks skip it. The evaluation left out one medium, as
    its metric's ``skipped_media`` and a single process say, not two."""
    monkeypatch.setattr('xmr.engine.hooks.corrupt_media.all_gather_object',
                        lambda mine, group=None: [mine, {'/v/a.mp4': 1}])
    hook = CorruptMediaHook()
    runner = _runner()
    getattr(hook, f'after_{mode}_iter')(runner, 0, {'skipped_media': ['/v/a.mp4']})
    getattr(hook, f'after_{mode}_epoch')(runner)
    assert runner.logger.warnings == [f'{scope}: 1 unreadable media skipped (1 file): /v/a.mp4']


def test_under_ddp_the_counts_go_through_the_host_s_gloo_group(monkeypatch):
    """The counts are host objects: under NCCL they are exchanged in the gloo group beside it
    (host_group), not copied to the device through the default group, a wait for the step."""
    seen = []
    gloo = object()
    monkeypatch.setattr('xmr.engine.hooks.corrupt_media.is_distributed', lambda: True)
    monkeypatch.setattr('xmr.engine.hooks.corrupt_media.host_group', lambda: gloo)
    monkeypatch.setattr('xmr.engine.hooks.corrupt_media.all_gather_object',
                        lambda mine, group=None: seen.append(group) or [mine])
    hook = CorruptMediaHook(interval=1)
    train_iter(hook, _runner(), 0, {'batch_size': 1, 'skipped_media': ['/v/a.mp4']})
    assert seen == [gloo]


class _SkipsEveryBatch(Hook):
    """Lists ``/v/a.jpg`` as skipped in every training batch (a damaged file read each step)."""

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        data_batch['skipped_media'] = ['/v/a.jpg']


def _poisoned_run(tmp_path, monkeypatch, patience: int):
    """Six iterations of the loops' tiny run, iteration 2's loss NaN, every batch skipping a
    file; the warnings the runner logged."""
    cfg = make_cfg(tmp_path, phases=[dict(PHASES[1], iters=6)])
    cfg.train_cfg.nonfinite_patience = patience
    cfg.custom_hooks.append(dict(type='CorruptMediaHook', interval=0))
    allow_mmengine_checkpoint_types()
    runner = Runner.from_cfg(cfg)
    for hook in (PoisonedIteration(at=2), _SkipsEveryBatch()):
        runner.register_hook(hook)
    warnings = []
    monkeypatch.setattr(runner.logger, 'warning', warnings.append)
    return runner, warnings


def test_a_training_step_with_a_non_finite_loss_counts_its_skipped_files(tmp_path, monkeypatch):
    """The tolerated NaN iteration reaches no after_train_iter, yet its batch skipped the file:
    six batches, six skips."""
    runner, warnings = _poisoned_run(tmp_path, monkeypatch, patience=1)
    runner.train()
    assert [w for w in warnings if 'unreadable' in w] == [
        'train epoch 1: 6 unreadable media skipped (1 file): /v/a.jpg (x6)']


def test_a_run_that_fails_names_the_files_it_skipped_since_the_last_report(tmp_path,
                                                                         monkeypatch):
    """A diverged run reaches no epoch end: its files are named as it fails (iterations 1 to
    3, the third non-finite)."""
    runner, warnings = _poisoned_run(tmp_path, monkeypatch, patience=0)
    with pytest.raises(TrainingDivergedError):
        runner.train()
    assert [w for w in warnings if 'unreadable' in w] == [
        'train up to the failure at iteration 3, this rank: 3 unreadable media skipped '
        '(1 file): /v/a.jpg (x3)']


def test_a_train_loop_that_fails_to_be_built_is_reported_once(tmp_path, monkeypatch):
    """The hook read runner.iter, which built the failed loop again: its error was logged a
    second time, with a traceback, as CorruptMediaHook.after_failed_train's, and noted on the
    run's own."""
    cfg = make_cfg(tmp_path, phases=[dict(PHASES[1], iters=6)])
    cfg.train_cfg.no_such_option = 1
    cfg.custom_hooks.append(dict(type='CorruptMediaHook', interval=0))
    allow_mmengine_checkpoint_types()
    runner = ResumeCheckedRunner.from_cfg(cfg)
    errors = []
    monkeypatch.setattr(runner.logger, 'error', errors.append)
    built = []
    build = runner.build_train_loop
    monkeypatch.setattr(runner, 'build_train_loop', lambda loop: built.append(loop) or build(loop))
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_option'") as info:
        runner.train()
    assert errors == []
    assert not getattr(info.value, '__notes__', None)
    assert len(built) == 1
