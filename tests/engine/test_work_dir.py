"""Where a run writes: the work directory every tool derives from a config."""
from mmengine.config import Config

from xmr.engine.work_dir import resolve_work_dir


def test_the_work_dir_is_the_option_then_the_config_s_own_then_named_after_the_config():
    own = Config(dict(work_dir='runs/dasd'))
    assert resolve_work_dir(own, 'configs/dasd/x.py', suffix='_no-sc') == 'runs/dasd'
    assert resolve_work_dir(own, 'configs/dasd/x.py', 'elsewhere') == 'elsewhere'
    assert own.work_dir == 'elsewhere'
    named = Config(dict())
    assert resolve_work_dir(named, 'configs/dasd/x.py', suffix='_no-sc') == 'work_dirs/x_no-sc'
    assert named.work_dir == 'work_dirs/x_no-sc'
