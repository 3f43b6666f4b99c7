"""The runner: its config dump (atomic, never over the config the run read), and what it does for
loops other than PhasedTrainLoop (schedulers saved and resumed, a failed run's hooks called)."""
from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.model import BaseModel
from torch import nn

from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
from xmr.engine.runner import ResumeCheckedRunner, dump_config_unless_over_source
from xmr.engine.work_dir import work_dir_locked_here


def _runner(tmp_path, cfg_text: str, suffix: str = '.py') -> SimpleNamespace:
    source = tmp_path / f'run{suffix}'
    source.write_text(cfg_text)
    work_dir = tmp_path / 'work'
    work_dir.mkdir()
    return SimpleNamespace(cfg=Config.fromfile(source), work_dir=str(work_dir),
                           timestamp='20261201_120000')


@pytest.mark.parametrize('suffix, text', [('.py', 'model = dict(type="M", width=8)\n'),
                                          ('.json', '{"model": {"type": "M", "width": 8}}')])
def test_the_dump_holds_the_config_under_its_name(tmp_path, suffix, text):
    runner = _runner(tmp_path, text, suffix)
    dump_config_unless_over_source(runner)
    dumped = Config.fromfile(tmp_path / 'work' / f'run{suffix}')
    assert dumped.model == {'type': 'M', 'width': 8}


def test_an_interrupted_dump_leaves_the_earlier_one_whole(tmp_path, monkeypatch):
    """MMEngine opened the dump for writing, then formatted the config: Ctrl-C in between left
    the dump of the run that wrote the checkpoints empty."""
    runner = _runner(tmp_path, 'model = dict(type="M", width=8)\n')
    dump_config_unless_over_source(runner)
    dumped = tmp_path / 'work' / 'run.py'
    before = dumped.read_text()

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Config, 'pretty_text', property(interrupted))
    with pytest.raises(KeyboardInterrupt):
        dump_config_unless_over_source(runner)
    assert dumped.read_text() == before
    assert sorted(p.name for p in dumped.parent.iterdir()) == ['run.py']


def test_a_dump_removes_the_temporary_a_killed_dump_left(tmp_path):
    """A test killed as it dumped its config left `.run.py.<host>-<pid>.tmp` in its `test/`
    folder through every later test: no checkpoint hook clears that folder."""
    import os
    import subprocess

    from xmr.fileio import temporary_path

    runner = _runner(tmp_path, 'model = dict(type="M", width=8)\n')
    gone = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                          capture_output=True, text=True, check=True)
    ours = temporary_path(Path(runner.work_dir) / 'run.py')
    left = ours.with_name(ours.name.replace(f'-{os.getpid()}.', f'-{int(gone.stdout)}.'))
    left.write_text('model = dict(')
    dump_config_unless_over_source(runner)
    assert sorted(p.name for p in Path(runner.work_dir).iterdir()) == ['run.py']


def test_the_config_read_from_the_work_dir_is_not_dumped_over(tmp_path):
    source = tmp_path / 'run.py'
    source.write_text('# the composed original\nmodel = dict(type="M")\n')
    runner = SimpleNamespace(cfg=Config.fromfile(source), work_dir=str(tmp_path),
                             timestamp='20261201_120000')
    dump_config_unless_over_source(runner)
    assert source.read_text().startswith('# the composed original')


class _Squares(BaseModel):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Linear(2, 1)

    def forward(self, x, mode='loss'):
        return dict(loss=self.weight(x).pow(2).mean())  # x: [B, 2]


def _scheduled_run(work_dir, iters: int, resume: bool, hooks: tuple = ()
                   ) -> ResumeCheckedRunner:
    """MMEngine's own loop with a warm-up, which xmr's runner and hooks also serve."""
    return ResumeCheckedRunner(
        model=_Squares(), work_dir=str(work_dir), default_scope='xmr', resume=resume,
        experiment_name=f'{work_dir.name}-{iters}-{resume}',
        train_dataloader=dict(dataset=[dict(x=torch.ones(2))] * 32, batch_size=2,
                              sampler=dict(type='DefaultSampler', shuffle=False),
                              collate_fn=dict(type='default_collate')),
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=iters),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=1.0)),
        param_scheduler=dict(type='LinearLR', start_factor=0.01, by_epoch=False, end=8),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=4, by_epoch=False)),
        custom_hooks=[dict(type='WeightsOnlyCheckpointHook'), *hooks], log_level='WARNING')


def test_a_runs_own_parameter_schedulers_are_saved_and_resumed(tmp_path):
    """Left out for PhasedTrainLoop, which has none (MMEngine warned of it at every save and
    resume), they were left out of every loop's checkpoints: a resumed warm-up began again."""
    allow_mmengine_checkpoint_types()  # as tools/train.py does
    whole = _scheduled_run(tmp_path / 'whole', 6, resume=False)
    whole.train()
    _scheduled_run(tmp_path / 'cut', 4, resume=False).train()
    assert 'param_schedulers' in torch.load(tmp_path / 'cut' / 'iter_4.pth', weights_only=True)
    resumed = _scheduled_run(tmp_path / 'cut', 6, resume=True)
    resumed.train()
    assert resumed.optim_wrapper.get_lr() == whole.optim_wrapper.get_lr()


class _StopButton(Hook):
    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        if runner.iter == 1:
            raise KeyboardInterrupt


def test_a_run_of_another_loop_that_raises_gives_back_the_lock_and_sigterm(tmp_path):
    """Only PhasedTrainLoop called the hooks' after_failed_train: a notebook's run of MMEngine's
    own loop, stopped, kept swallowing SIGTERM and kept the work dir locked."""
    before = signal.getsignal(signal.SIGTERM)
    run = _scheduled_run(tmp_path, 6, resume=False, hooks=(
        dict(type='PreemptionHook'), dict(type='WorkDirLockHook'), _StopButton()))
    with pytest.raises(KeyboardInterrupt):
        run.train()
    assert signal.getsignal(signal.SIGTERM) is before
    assert not work_dir_locked_here(tmp_path)


@pytest.mark.skipif(not Path('/dev/full').exists(), reason='needs /dev/full (a full disk)')
def test_a_run_log_that_cannot_be_written_says_so_once(capsys):
    """A run log on a full disk printed logging's traceback for every line logged (a test on
    the full disk holding its checkpoint: three, burying its error line)."""
    from mmengine.logging import MMLogger

    runner = ResumeCheckedRunner.__new__(ResumeCheckedRunner)  # its logger alone
    runner._experiment_name = 'full_disk_log'
    logger = ResumeCheckedRunner.build_logger(runner, log_file='/dev/full')
    try:
        for line in range(3):
            logger.info(f'line {line}')
    finally:
        for handler in list(logger.handlers):
            if handler.stream is not sys.stdout:
                handler.stream = None  # its close would flush to /dev/full again
            handler.close()
        MMLogger._instance_dict.pop('full_disk_log')
    captured = capsys.readouterr()
    assert 'line 2' in captured.out  # the terminal keeps every line
    assert 'Logging error' not in captured.err
    assert captured.err.splitlines() == [
        'warning: /dev/full: writing the run log failed ([Errno 28] No space left on device); '
        'its lines go to the terminal alone']
