"""Where a run writes: the work directory every tool derives from a config."""
import os

from mmengine.config import Config

from xmr.engine.work_dir import latest_checkpoint, resolve_work_dir


def test_the_work_dir_is_the_option_then_the_config_s_own_then_named_after_the_config():
    own = Config(dict(work_dir='runs/dasd'))
    # Each row its own folder, beside the config's own.
    assert resolve_work_dir(own, 'configs/dasd/x.py', suffix='_no-sc') == 'runs/dasd_no-sc'
    for folder, beside in [('runs/dasd/', 'runs/dasd'), ('.', os.getcwd()),
                           ('..', os.path.dirname(os.getcwd()))]:
        assert resolve_work_dir(Config(dict(work_dir=folder)), 'x.py', suffix='_no-sc') == \
            beside + '_no-sc'
    assert resolve_work_dir(Config(dict(work_dir='.')), 'x.py') == '.'
    assert resolve_work_dir(own, 'configs/dasd/x.py', 'elsewhere') == 'elsewhere'
    assert own.work_dir == 'elsewhere'
    named = Config(dict())
    assert resolve_work_dir(named, 'configs/dasd/x.py', suffix='_no-sc') == 'work_dirs/x_no-sc'
    assert named.work_dir == 'work_dirs/x_no-sc'


def test_the_latest_checkpoint_is_read_from_a_pointer_written_by_hand(tmp_path):
    """``echo PATH > last_checkpoint`` ends the line: the newline is no part of the path."""
    assert latest_checkpoint(tmp_path) is None
    (tmp_path / 'iter_4.pth').write_bytes(b'')
    (tmp_path / 'last_checkpoint').write_text(f'{tmp_path / "iter_4.pth"}\n')
    assert latest_checkpoint(tmp_path) == str(tmp_path / 'iter_4.pth')
