"""The runner's config dump: atomic, never over the config the run read."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from mmengine.config import Config

from xmr.engine.runner import dump_config_unless_over_source


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


def test_the_config_read_from_the_work_dir_is_not_dumped_over(tmp_path):
    source = tmp_path / 'run.py'
    source.write_text('# the composed original\nmodel = dict(type="M")\n')
    runner = SimpleNamespace(cfg=Config.fromfile(source), work_dir=str(tmp_path),
                             timestamp='20261201_120000')
    dump_config_unless_over_source(runner)
    assert source.read_text().startswith('# the composed original')
