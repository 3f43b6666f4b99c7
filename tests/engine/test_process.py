"""prepare_process: the one set-up every tool gives its process before building anything."""
from __future__ import annotations

import importlib
import os

import pytest
import torch
from mmengine.config import Config

import xmr.engine.process
from tests.conftest import REPO
from xmr.engine.determinism import CUBLAS_WORKSPACE_CONFIG
from xmr.engine.process import prepare_process
from xmr.utils.cli import UserError

DEMO = REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'


@pytest.fixture
def clean_environment(monkeypatch):
    """No thread count, workspace or launcher from the caller; torch's threads restored."""
    for name in ('OMP_NUM_THREADS', CUBLAS_WORKSPACE_CONFIG, 'WORLD_SIZE', 'RANK'):
        monkeypatch.setenv(name, '')
        monkeypatch.delenv(name)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_it_sets_the_threads_and_the_workspace_and_checks_the_launcher(clean_environment,
                                                                       monkeypatch):
    cfg = Config(dict(cpu_threads=1, randomness=dict(seed=0, deterministic=True)))
    prepare_process(cfg, 'none')
    assert torch.get_num_threads() == 1
    assert os.environ[CUBLAS_WORKSPACE_CONFIG] == ':4096:8'
    monkeypatch.setenv('WORLD_SIZE', '2')
    with pytest.raises(UserError, match='^--launcher none: torchrun started this process'):
        prepare_process(cfg, 'none')


class Prepared(Exception):
    """Raised in place of the process's set-up, with what the tool passed it."""


@pytest.mark.parametrize('tool, argv, start_group', [
    ('train', lambda tmp: [str(DEMO), '--work-dir', str(tmp / 'work')], False),
    ('test', lambda tmp: [str(DEMO), str(tmp / 'model.pth')], False),
    ('cache_features', lambda tmp: [str(DEMO), '--work-dir', str(tmp)], True),
])
def test_every_tool_sets_its_process_up_through_prepare_process(monkeypatch, tmp_path, tool, argv,
                                                                start_group):
    """The three tools made the same three calls each, a copy that could drift apart."""
    monkeypatch.syspath_prepend(str(REPO / 'tools'))
    torch.save({'state_dict': {}}, tmp_path / 'model.pth')

    def prepared(cfg, launcher, *, start_group=False):
        raise Prepared(launcher, start_group)

    monkeypatch.setattr(xmr.engine.process, 'prepare_process', prepared)
    with pytest.raises(Prepared) as seen:
        importlib.import_module(tool).main([*argv(tmp_path), '--launcher', 'slurm'])
    assert seen.value.args == ('slurm', start_group)
