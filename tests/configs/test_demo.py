"""The bundled demo config, on a shortened schedule, through tools/train.py."""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from mmengine.config import Config

from tests.conftest import REPO
from xmr.utils.cli import UserError

DEMO = REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'
sys.path.insert(0, str(REPO / 'tools'))
import train as train_tool  # noqa: E402


def test_demo_config_describes_the_three_phases():
    cfg = Config.fromfile(DEMO)
    phases = cfg.train_cfg.phases
    assert [p.name for p in phases] == ['source_finetune', 'cross_lingual', 'cross_modal']
    assert phases[0].trainable == ['backbone', 'losses.source_cm']
    assert phases[0].dataloader == 'source_finetune_dataloader'  # named: overrides reach it
    assert cfg.source_finetune_dataloader.dataset.languages == []
    assert all(p.trainable == ['target'] for p in phases[1:])  # branch (+ disentangler)
    assert cfg.model.language_branch.languages == ['de', 'fr', 'zh', 'ja']


def test_demo_runs_a_shortened_schedule_to_the_end(tmp_path: Path):
    short = [
        'train_cfg.phases.0.iters=3', 'train_cfg.phases.1.iters=3', 'train_cfg.phases.2.iters=3',
        'source_finetune_dataloader.batch_size=16',
        'source_finetune_dataloader.dataset.num_scenes=64',
        'train_dataloader.batch_size=16', 'train_dataloader.dataset.num_scenes=64',
        'val_dataloader.dataset.num_scenes=40',
        'model.language_branch.tokenizer.corpus.num_scenes=100',
        'model.language_branch.tokenizer.vocab_size=200',
    ]
    from mmengine.logging import MMLogger
    from mmengine.registry import DefaultScope

    def file_handlers() -> set[logging.FileHandler]:
        return {handler for logger in MMLogger._instance_dict.values()
                for handler in logger.handlers if isinstance(handler, logging.FileHandler)}

    # Those of runners other tests of this process still hold (a module's fixture) are theirs.
    loggers, handlers = set(MMLogger._instance_dict), file_handlers()
    scope = DefaultScope.get_current_instance()
    train_tool.main([str(DEMO), '--work-dir', str(tmp_path), '--cfg-options', *short])
    # Called from Python, it leaves no run's logger (with its log file open) nor scope of its
    # own; MMEngine's default logger ('mmengine', made at the first line logged) may stay.
    assert set(MMLogger._instance_dict) <= loggers | {'mmengine'}
    assert file_handlers() <= handlers
    assert DefaultScope.get_current_instance() is scope

    report = json.loads((tmp_path / 'phase_report.json').read_text())
    assert [c['column'] for c in report] == [
        'source_finetune end', 'cross_lingual end', 'cross_modal end']
    table = (tmp_path / 'phase_report.md').read_text()
    for row in ('en', 'de', 'fr', 'zh', 'ja', 'mAR'):
        assert f'| {row} ' in table
    english = [c['metrics']['en/AR'] for c in report]
    assert english[0] == english[1] == english[2], 'the frozen English teacher changed'
    assert report[0]['metrics']['de/AR'] != report[1]['metrics']['de/AR']
    assert (tmp_path / 'iter_9.pth').is_file()
    # Resumed where it ended: nothing left to train, but the resume itself is done.
    train_tool.main([str(DEMO), '--work-dir', str(tmp_path), '--resume', '--cfg-options', *short])
    first, second = sorted(tmp_path.glob('*/*.log'))
    # The resume's lines, its thread count logged before its runner exists included, are not in
    # the first run's log (whose logger stayed current after main).
    assert 'Load checkpoint from' in second.read_text(encoding='utf-8')
    logs = first.read_text(encoding='utf-8') + second.read_text(encoding='utf-8')
    assert logs.count('Load checkpoint from') == 1
    assert 'torch CPU threads' not in first.read_text(encoding='utf-8')
    # Warnings of MMEngine's that xmr's phases make empty: no parameter schedulers (the loop
    # sets the rates), losses of an earlier phase dropped from the log window.
    for empty in ('save_param_scheduler', 'resume_param_scheduler', 'not defined in message_hub'):
        assert empty not in logs


def test_train_tool_refuses_a_missing_config_or_checkpoint(tmp_path: Path):
    with pytest.raises(UserError, match=r'nope.py \(CONFIG\): no such file'):
        train_tool.main([str(tmp_path / 'nope.py')])
    with pytest.raises(UserError, match=r'missing.pth \(--resume\): no such file'):
        train_tool.main([str(DEMO), '--resume', str(tmp_path / 'missing.pth')])
