"""tools/print_config.py: the config a run would train, merged, printed and readable back."""
from __future__ import annotations

import importlib.util

from mmengine.config import Config

from tests.conftest import REPO

TOOL = REPO / 'tools' / 'print_config.py'


def test_the_printed_config_is_the_runs_with_ablations_and_options(capsys, tmp_path):
    spec = importlib.util.spec_from_file_location('print_config', TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    tool.main(['xmr::demo/dasd_tiny-clip_synthetic.py', '--ablation', 'dasd/no-sc',
               '--cfg-options', 'train_cfg.phases.2.iters=30'])
    printed = tmp_path / 'printed.py'
    printed.write_text(capsys.readouterr().out)
    cfg = Config.fromfile(printed)
    assert cfg.train_cfg.phases[2].iters == 30
    assert cfg.model.disentangler.use_consistency_loss is False  # the ablation's row
    assert cfg.work_dir == 'work_dirs/dasd_tiny-clip_synthetic_no-sc'
    assert not (REPO / cfg.work_dir).exists()  # printing writes nothing
