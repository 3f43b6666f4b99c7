"""Where a run writes: the work directory every tool derives from a config."""
import os
import re

import pytest
from mmengine.config import Config

from xmr.engine.work_dir import (
    latest_checkpoint,
    newest_periodic_checkpoint,
    resolve_work_dir,
    training_checkpoints,
)


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


def test_a_work_dir_given_is_the_folder_written_whatever_the_rows():
    """``--work-dir`` names the folder: a row's suffix goes on the config's own folder only."""
    cfg = Config(dict(work_dir='runs/dasd'))
    assert resolve_work_dir(cfg, 'x.py', 'mine', suffix='_no-sc') == 'mine'


def test_the_training_checkpoints_are_the_periodic_and_best_files_sorted(tmp_path):
    """A work dir named with glob characters (``[lr=1e-4]``) holds its checkpoints all the
    same: read as a pattern, it matched no file of its own."""
    work_dir = tmp_path / 'dasd[lr=1e-4]'
    work_dir.mkdir()
    for name in ('iter_8.pth', 'best_xtd10_mAR_iter_4.pth', 'iter_12.pth', 'model.pth',
                 'last_checkpoint'):
        (work_dir / name).write_bytes(b'')
    assert training_checkpoints(work_dir) == ['best_xtd10_mAR_iter_4.pth', 'iter_12.pth',
                                              'iter_8.pth']


def test_the_newest_periodic_checkpoint_is_the_one_of_most_iterations(tmp_path):
    """By number, not by name (``iter_9`` sorts after ``iter_12``), and of the names the
    checkpoint hook writes alone (a copy ``iter_40_backup.pth`` is none of them)."""
    work_dir = tmp_path / 'run[1]'
    work_dir.mkdir()
    assert newest_periodic_checkpoint(work_dir) is None
    for name in ('iter_9.pth', 'iter_12.pth', 'iter_40_backup.pth', 'best_iter_50.pth'):
        (work_dir / name).write_bytes(b'')
    assert newest_periodic_checkpoint(work_dir) == str(work_dir / 'iter_12.pth')


def test_a_pointer_to_a_missing_checkpoint_is_refused_naming_both(tmp_path):
    (tmp_path / 'last_checkpoint').write_text('/elsewhere/iter_4.pth')
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"{tmp_path / 'last_checkpoint'}: names '/elsewhere/iter_4.pth', which does not "
            'exist; resume from a checkpoint by path: --resume PATH')):
        latest_checkpoint(tmp_path)


def test_a_copied_work_dir_s_pointer_is_followed_only_where_nothing_else_is_meant(tmp_path):
    """A copy of another run's work dir keeps its pointer to the original's checkpoint. The
    copy's own file of that name is meant; lacking it, the original's is refused where the
    copy holds periodic checkpoints of its own, and taken where it holds none, or where the
    checkpoint's folder is no run's work dir (a checkpoint hook's ``out_dir``)."""
    original, copy = tmp_path / 'original', tmp_path / 'copy'
    original.mkdir()
    copy.mkdir()
    (original / 'iter_8.pth').write_bytes(b'')
    (original / 'last_checkpoint').write_text(str(original / 'iter_8.pth'))
    (copy / 'last_checkpoint').write_text(str(original / 'iter_8.pth'))
    assert latest_checkpoint(copy) == str(original / 'iter_8.pth')  # nothing of its own
    (copy / 'iter_4.pth').write_bytes(b'')
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"names '{original / 'iter_8.pth'}', which is not in this work dir (a copy of "
            "another run's?), and the work dir holds no iter_8.pth of its own; resume from a "
            f"checkpoint by path: --resume {copy / 'iter_4.pth'} (its newest) or --resume "
            f"{original / 'iter_8.pth'}")):
        latest_checkpoint(copy)
    (original / 'last_checkpoint').unlink()  # the folder of an out_dir, no work dir
    assert latest_checkpoint(copy) == str(original / 'iter_8.pth')
    (copy / 'iter_8.pth').mkdir()  # a folder of that name is no checkpoint of its own
    assert latest_checkpoint(copy) == str(original / 'iter_8.pth')
    (copy / 'iter_8.pth').rmdir()
    (copy / 'iter_8.pth').write_bytes(b'')
    assert latest_checkpoint(copy) == str(copy / 'iter_8.pth')
