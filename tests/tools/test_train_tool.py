"""tools/train.py --resume: PATH, latest (an error when there is nothing to resume) and auto."""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp
from mmengine.config import Config

from tests.conftest import REPO, terminated_while_held
from tests.engine.hooks.test_phase_report_hook import report_cfg
from tests.test_run_config import cached_gallery_config
from xmr.engine.checkpoint import CheckpointReadError
from xmr.registry import UnknownOptionError
from xmr.utils.cli import UserError

DEMO = REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'
sys.path.insert(0, str(REPO / 'tools'))
import train as train_tool  # noqa: E402


def save_checkpoint(path: Path, state_dict: dict | None = None, iteration: int = 4) -> None:
    """A checkpoint of training at ``iteration`` holding ``state_dict``: what a resume reads
    besides weights."""
    torch.save({'state_dict': state_dict or {}, 'meta': {'epoch': 0, 'iter': iteration},
                'message_hub': {}}, path)


def resumed(work_dir: Path, *resume: str) -> tuple[bool, str | None]:
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(work_dir), '--resume', *resume])
    cfg = train_tool.build_config(args)
    return cfg.resume, cfg.load_from


def test_resume_without_a_checkpoint_is_an_error_and_auto_starts_a_new_run(tmp_path):
    with pytest.raises(UserError, match=f'{tmp_path}: --resume: the work dir has no checkpoint '
                       'to resume from'):
        resumed(tmp_path)
    with pytest.raises(UserError, match='has no checkpoint'):
        resumed(tmp_path, 'latest')
    assert resumed(tmp_path, 'auto') == (False, None)


def test_resume_latest_and_auto_take_the_checkpoint_last_checkpoint_names(tmp_path):
    checkpoint = tmp_path / 'iter_500.pth'
    save_checkpoint(checkpoint, iteration=500)
    (tmp_path / 'last_checkpoint').write_text(str(checkpoint))
    assert resumed(tmp_path) == (True, str(checkpoint))
    assert resumed(tmp_path, 'auto') == (True, str(checkpoint))
    other = tmp_path / 'other.pth'
    save_checkpoint(other, iteration=500)
    assert resumed(tmp_path, str(other)) == (True, str(other))


def test_a_resume_path_behind_checkpoints_of_the_work_dir_is_refused(tmp_path):
    """Resuming iter_4.pth of a run that went on to iter_12 (to change a later phase) wrote
    iter_8.pth, iter_12.pth and best_mAR_iter_12.pth of another trajectory over that run's, and
    left its later ones beside them, with no word; a new run is refused for that reason."""
    work_dir = tmp_path / 'run'
    work_dir.mkdir()
    for iteration in (4, 8, 12):
        save_checkpoint(work_dir / f'iter_{iteration}.pth', iteration=iteration)
    for name in ('best_mAR_iter_4.pth', 'best_mAR_iter_12.pth'):
        save_checkpoint(work_dir / name)
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'iter_12.pth'))
    earliest = str(work_dir / 'iter_4.pth')
    with pytest.raises(UserError, match=re.escape(
            f'{work_dir}: holds checkpoints past iteration 4, where {earliest} resumes '
            '(iter_8.pth, best_mAR_iter_12.pth, iter_12.pth), which its run would overwrite and '
            'mix with its own: resume the newest with --resume, resume this one into another '
            '--work-dir')):
        resumed(work_dir, earliest)
    # Into another work dir, or from the newest checkpoint, nothing is overwritten.
    assert resumed(tmp_path / 'branch', earliest) == (True, earliest)
    newest = str(work_dir / 'iter_12.pth')
    assert resumed(work_dir, newest) == (True, newest)


def test_a_last_checkpoint_naming_a_missing_file_is_named(tmp_path):
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_9.pth'))
    with pytest.raises(FileNotFoundError, match=r"last_checkpoint: names '.*iter_9\.pth', which "
                       'does not exist'):
        resumed(tmp_path, 'auto')


def test_a_moved_or_copied_work_dir_resumes_from_its_own_checkpoint(tmp_path):
    """last_checkpoint holds MMEngine's absolute path, of where the work dir was written."""
    moved = tmp_path / 'moved'
    moved.mkdir()
    save_checkpoint(moved / 'iter_9.pth')
    (moved / 'last_checkpoint').write_text(str(tmp_path / 'gone' / 'iter_9.pth'))
    assert resumed(moved) == (True, str(moved / 'iter_9.pth'))
    original = tmp_path / 'original'
    original.mkdir()
    save_checkpoint(original / 'iter_9.pth')  # a copy: the original still there
    (moved / 'last_checkpoint').write_text(str(original / 'iter_9.pth'))
    assert resumed(moved, 'auto') == (True, str(moved / 'iter_9.pth'))


def test_a_copied_work_dir_missing_the_checkpoint_its_pointer_names_is_refused(tmp_path):
    """A fork of a finished run at an earlier checkpoint: the copy's iter_50.pth removed, its
    pointer still naming the original's. Resuming took the original's file, outside the copy,
    and the copy trained nothing."""
    original, fork = tmp_path / 'original', tmp_path / 'fork'
    for folder in (original, fork):
        folder.mkdir()
        save_checkpoint(folder / 'iter_45.pth')
    save_checkpoint(original / 'iter_50.pth')
    for folder in (original, fork):
        (folder / 'last_checkpoint').write_text(str(original / 'iter_50.pth'))
    for resume in ((), ('auto',)):
        with pytest.raises(FileNotFoundError, match=(
                f"names '{original / 'iter_50.pth'}', which is not in this work dir .*no "
                f'iter_50.pth of its own; resume from a checkpoint by path: --resume '
                f'{fork / "iter_45.pth"} \\(its newest\\) or --resume {original / "iter_50.pth"}')):
            resumed(fork, *resume)
    # Checkpoints saved to another folder (the hook's out_dir): the work dir holds none.
    (fork / 'iter_45.pth').unlink()
    assert resumed(fork) == (True, str(original / 'iter_50.pth'))


def test_checkpoints_moved_to_an_out_dir_part_way_through_a_run_are_resumed(tmp_path):
    """The first disk filled: a resumed run saved on to ``out_dir``, MMEngine's pointer in the
    work dir naming the checkpoint there; the work dir's own are older."""
    work_dir, out_dir = tmp_path / 'work_dirs' / 'run', tmp_path / 'bigdisk' / 'run'
    for folder, name in ((work_dir, 'iter_20.pth'), (out_dir, 'iter_40.pth')):
        folder.mkdir(parents=True)
        save_checkpoint(folder / name)
    (work_dir / 'last_checkpoint').write_text(str(out_dir / 'iter_40.pth'))
    for resume in ((), ('auto',)):
        assert resumed(work_dir, *resume) == (True, str(out_dir / 'iter_40.pth'))


def test_a_new_run_refuses_the_checkpoints_an_earlier_run_saved_to_the_hooks_out_dir(
        tmp_path):
    """With ``default_hooks.checkpoint.out_dir`` the work dir holds no checkpoint: a second
    run into the same work dir replaced the first run's ``<out_dir>/<work dir>/iter_16.pth``."""
    work_dir = tmp_path / 'work'
    cfg = report_cfg(work_dir)
    cfg.default_hooks.checkpoint.out_dir = str(tmp_path / 'bigdisk')
    config = tmp_path / 'tiny.py'
    cfg.dump(str(config))
    train_tool.main([str(config), '--work-dir', str(work_dir)])
    saved = tmp_path / 'bigdisk' / 'work' / 'iter_16.pth'
    written = saved.stat().st_mtime_ns
    with pytest.raises(UserError, match=re.escape(
            f"{tmp_path / 'bigdisk' / 'work'}: holds the checkpoints of an earlier run "
            '(iter_16.pth), which a new run would overwrite')):
        train_tool.main([str(config), '--work-dir', str(work_dir)])
    assert saved.stat().st_mtime_ns == written


def test_a_new_run_refuses_a_work_dir_with_an_earlier_runs_checkpoints(tmp_path):
    (tmp_path / 'iter_16.pth').write_bytes(b'weights')
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_16.pth'))
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(tmp_path)])
    with pytest.raises(UserError, match=(
            f'{tmp_path}: holds the checkpoints of an earlier run \\(iter_16.pth\\), which a new '
            'run would overwrite and mix with its own: continue it with --resume')):
        train_tool.build_config(args)
    (tmp_path / 'iter_16.pth').unlink()  # a pointer to nothing left: a new run may start
    assert train_tool.build_config(args).get('resume') is not True


@pytest.mark.parametrize('pointer', [None, 'iter_20.pth'])
def test_checkpoints_refuse_a_new_run_whatever_last_checkpoint_says(tmp_path, pointer):
    """A work dir copied without last_checkpoint, or whose pointer names a deleted file."""
    for name in ('best_mAR_iter_8.pth', 'iter_12.pth', 'iter_16.pth', 'iter_4.pth'):
        (tmp_path / name).write_bytes(b'weights')
    if pointer is not None:
        (tmp_path / 'last_checkpoint').write_text(str(tmp_path / pointer))
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(tmp_path)])
    with pytest.raises(UserError, match=(
            r'holds the checkpoints of an earlier run \(best_mAR_iter_8.pth, iter_12.pth, '
            r'iter_16.pth, ... \(4 in all\)\).*--resume PATH.*another --work-dir')):
        train_tool.build_config(args)


def test_a_work_dir_named_with_glob_characters_is_searched_for_checkpoints_as_named(tmp_path):
    """``run[1]`` read as a pattern would match ``run1`` only, and find no checkpoint."""
    work_dir = tmp_path / 'run[1]'
    work_dir.mkdir()
    (work_dir / 'iter_4.pth').write_bytes(b'weights')
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(work_dir)])
    with pytest.raises(UserError, match=r'earlier run \(iter_4.pth\)'):
        train_tool.build_config(args)


def test_resume_without_last_checkpoint_takes_the_newest_periodic_checkpoint(tmp_path):
    """A kill between the first iter_<n>.pth and its pointer: --resume auto was refused as a
    new run ('holds the checkpoints of an earlier run'), --resume found no checkpoint."""
    for name in ('iter_4.pth', 'iter_12.pth', 'iter_8.pth', 'best_mAR_iter_10.pth'):
        save_checkpoint(tmp_path / name)
    assert resumed(tmp_path) == (True, str(tmp_path / 'iter_12.pth'))
    assert resumed(tmp_path, 'auto') == (True, str(tmp_path / 'iter_12.pth'))
    (tmp_path / 'iter_12.pth').write_bytes(b'')  # what no atomic save leaves: refused
    with pytest.raises(CheckpointReadError, match='iter_12.pth'):
        resumed(tmp_path, 'auto')


def test_best_checkpoints_alone_start_a_new_run_under_auto_alone(tmp_path):
    """A run killed after a validation, before its first periodic checkpoint (validation
    every 300 iterations, checkpoints every 1000): every requeue with --resume auto was
    refused, and --resume said to drop --resume."""
    save_checkpoint(tmp_path / 'best_mAR_iter_300.pth')
    assert resumed(tmp_path, 'auto') == (False, None)
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(tmp_path), '--resume', 'auto'])
    assert train_tool.build_config(args).default_hooks.checkpoint.earlier_best == [
        'best_mAR_iter_300.pth']  # the new run's own first best replaces it
    assert train_tool._is_xmr_checkpoint_hook(dict(type='CheckpointHook'))
    assert not train_tool._is_xmr_checkpoint_hook(dict(type='mmengine.CheckpointHook'))
    with pytest.raises(UserError, match=(
            r'no iter_\*.pth; best_mAR_iter_300.pth keeps no optimiser state to resume\): drop '
            r'--resume to start a new run \(--resume auto replaces the best checkpoints')):
        resumed(tmp_path)
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(tmp_path)])
    with pytest.raises(UserError, match=r'earlier run \(best_mAR_iter_300.pth\).*--resume auto '
                       r'where it saved best_\*.pth alone'):
        train_tool.build_config(args)
    # The best of a run that ended without a periodic checkpoint (save_last=False): kept.
    (tmp_path / '.train_finished').write_text('900\n')
    for resume in ('auto', 'latest'):
        with pytest.raises(UserError, match=(
                r'holds the best checkpoints of a run that ended \(best_mAR_iter_300.pth\) and '
                'saved no periodic checkpoint')):
            resumed(tmp_path, resume)


def test_a_truncated_checkpoint_is_refused_before_the_work_dir_is_written(tmp_path):
    save_checkpoint(tmp_path / 'full.pth')
    data = (tmp_path / 'full.pth').read_bytes()
    cut = tmp_path / 'cut.pth'
    cut.write_bytes(data[:len(data) // 2])
    work_dir = tmp_path / 'work'
    with pytest.raises(CheckpointReadError, match=f'{cut}: truncated or corrupt checkpoint'):
        train_tool.main([str(DEMO), '--work-dir', str(work_dir), '--resume', str(cut)])
    assert not work_dir.exists()  # no config dump, no log
    work_dir.mkdir()
    (work_dir / 'iter_9.pth').write_bytes(data[:-10])
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'iter_9.pth'))
    with pytest.raises(CheckpointReadError, match='iter_9.pth: truncated or corrupt'):
        resumed(work_dir, 'auto')


@pytest.mark.slow
def test_a_refused_resume_leaves_the_config_dump_it_points_to(tmp_path):
    """MMEngine dumps the config as the runner is built; the schedule check refuses later."""
    work_dir = tmp_path / 'work'
    cfg = report_cfg(work_dir)
    cfg.custom_hooks.insert(0, dict(type='WorkDirLockHook'))
    config = tmp_path / 'tiny.py'
    cfg.dump(str(config))
    train_tool.main([str(config), '--work-dir', str(work_dir)])
    dump = (work_dir / 'tiny.py').read_text()
    with pytest.raises(ValueError, match='the work dir holds its dump'):
        train_tool.main([str(config), '--work-dir', str(work_dir), '--resume',
                         '--cfg-options', 'train_cfg.phases.0.lr=0.002'])
    assert (work_dir / 'tiny.py').read_text() == dump
    train_tool.main([str(config), '--work-dir', str(work_dir), '--resume', '--cfg-options',
                     'default_hooks.logger.interval=7'])  # accepted: dumped
    assert 'interval=7' in (work_dir / 'tiny.py').read_text()


def test_a_config_that_says_resume_resumes_as_the_flag_does(tmp_path):
    """MMEngine's resume=True: from load_from, else the latest checkpoint if any. The tool
    refused a work dir holding checkpoints as if it were a new run's."""
    config = tmp_path / 'resumed.py'
    config.write_text(f"_base_ = ['{DEMO}']\nresume = True\n")
    work_dir = tmp_path / 'work'
    work_dir.mkdir()
    args = train_tool.parse_args([str(config), '--work-dir', str(work_dir)])
    cfg = train_tool.build_config(args)
    assert (cfg.resume, cfg.load_from) == (False, None)  # nothing yet: a new run
    checkpoint = work_dir / 'iter_8.pth'
    save_checkpoint(checkpoint)
    (work_dir / 'last_checkpoint').write_text(str(checkpoint))
    cfg = train_tool.build_config(args)
    assert (cfg.resume, cfg.load_from) == (True, str(checkpoint))
    config.write_text(f"_base_ = ['{DEMO}']\nresume = True\nload_from = 'gone.pth'\n")
    with pytest.raises(UserError, match=r'^gone.pth \(load_from \(resume = True\)\): no such '
                       'file: give a .pth'):
        train_tool.build_config(args)


@pytest.mark.parametrize('flag', ['--resume', '--cfg-options'])
def test_a_folder_given_as_checkpoint_is_named_a_folder(tmp_path, flag):
    """A work dir given for its checkpoint was said not to exist (--resume, load_from)."""
    folder = tmp_path / 'run'
    folder.mkdir()
    given = [flag, str(folder)] if flag == '--resume' else [flag, f'load_from={folder}']
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(tmp_path / 'wd'), *given])
    key = '--resume' if flag == '--resume' else 'load_from'
    with pytest.raises(UserError, match=f'^{folder} \\({key}\\): is a folder, not a file: give '
                       'a .pth'):
        train_tool.build_config(args)


def test_a_load_from_that_does_not_exist_is_named_before_the_run_starts(tmp_path):
    """MMEngine said '<path> can not be found.' once the runner had written its log."""
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(tmp_path), '--cfg-options',
                                  f'load_from={tmp_path}/gone.pth'])
    with pytest.raises(UserError, match=rf'^{tmp_path}/gone.pth \(load_from\): no such file: '
                       'give a .pth written by tools/train.py'):
        train_tool.build_config(args)
    save_checkpoint(tmp_path / 'gone.pth')
    assert train_tool.build_config(args).load_from == f'{tmp_path}/gone.pth'
    assert list(tmp_path.iterdir()) == [tmp_path / 'gone.pth']


def test_a_run_from_trained_weights_reads_the_vocabulary_they_carry(tmp_path):
    """The run's embedding rows start from load_from's, trained on its ids; a resumed run's
    are the checkpoint's own."""
    from xmr.models.language.carried_vocabulary import carried_entry

    facts = json.dumps(dict(languages=['de'], **carried_entry(b'a model'))).encode()
    carrying = tmp_path / 'trained.pth'
    save_checkpoint(carrying, {'_extra_state': torch.tensor(list(facts), dtype=torch.uint8)})
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(tmp_path / 'new'),
                                  '--cfg-options', f'load_from={carrying}'])
    tokenizer = train_tool.build_config(args).model.language_branch.tokenizer
    assert tokenizer.model_file == str(carrying) and 'corpus' not in tokenizer
    (tmp_path / 'new').mkdir()
    resumed_from = tmp_path / 'new' / 'iter_4.pth'
    resumed_from.write_bytes(carrying.read_bytes())
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(tmp_path / 'new'), '--resume',
                                  str(resumed_from)])
    tokenizer = train_tool.build_config(args).model.language_branch.tokenizer
    assert tokenizer.model_file == str(resumed_from) and 'corpus' not in tokenizer


def test_a_resume_from_weights_alone_is_refused_before_the_work_dir_is_written(tmp_path):
    """A phase_best/ file (a bare state dict) or a converted model given to --resume, or named
    by last_checkpoint: MMEngine's resume failed on them with KeyError: 'meta' (or 'epoch'),
    an 'unexpected' error, once the runner had been built and had written its log."""
    weights = {'language_branch.embedding.weight': torch.zeros(2, 2)}
    best, converted = tmp_path / 'phase_best.pth', tmp_path / 'converted.pth'
    torch.save(weights, best)
    torch.save({'state_dict': weights, 'meta': {'converted_from': 'dasd.pth'}}, converted)
    work_dir = tmp_path / 'work'
    for path, lacks in ((best, 'state_dict, message_hub, meta.epoch, meta.iter'),
                        (converted, 'message_hub, meta.epoch, meta.iter')):
        with pytest.raises(CheckpointReadError, match=(
                f'^{path}: not a checkpoint to resume from: it has no {lacks}, .* '
                f'load_from={path} without --resume$')):
            train_tool.main([str(DEMO), '--work-dir', str(work_dir), '--resume', str(path)])
    assert not work_dir.exists()  # no config dump, no log
    work_dir.mkdir()
    (work_dir / 'last_checkpoint').write_text(str(best))
    with pytest.raises(CheckpointReadError, match=f'^{best}: not a checkpoint to resume from'):
        resumed(work_dir, 'auto')


def test_a_truncated_or_empty_load_from_is_named_before_the_work_dir_is_written(tmp_path):
    """MMEngine's torch.load said 'EOFError:' or 'PytorchStreamReader failed ...', naming no
    file, after the runner had written its config dump and log."""
    save_checkpoint(tmp_path / 'full.pth')
    cut, empty = tmp_path / 'cut.pth', tmp_path / 'empty.pth'
    cut.write_bytes((tmp_path / 'full.pth').read_bytes()[:-10])
    empty.write_bytes(b'')
    work_dir = tmp_path / 'work'
    for path, problem in ((cut, 'truncated or corrupt checkpoint'), (empty, 'not a checkpoint')):
        with pytest.raises(CheckpointReadError, match=f'{path}: {problem}'):
            train_tool.main([str(DEMO), '--work-dir', str(work_dir), '--cfg-options',
                             f'load_from={path}'])
    assert not work_dir.exists()


def test_a_validation_given_in_part_is_refused_before_the_run_starts(tmp_path):
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(tmp_path), '--cfg-options',
                                  'val_evaluator=None'])
    with pytest.raises(UserError, match='^val_evaluator: is None while val_dataloader and '
                       'val_cfg are set'):
        train_tool.build_config(args)


@pytest.mark.parametrize('flags', [[], ['--amp']])
def test_a_test_only_config_is_refused_naming_the_test_tool(tmp_path, flags):
    """--amp met its missing optim_wrapper as an AttributeError; without it the runner built
    the model (M-CLIP's large towers) before saying that nothing trains."""
    config = REPO / 'configs' / 'pectvlm' / 'mclip-xlmr-l14_xtd10_zeroshot.py'
    args = train_tool.parse_args([str(config), '--work-dir', str(tmp_path), *flags])
    with pytest.raises(UserError, match=(
            r'mclip-xlmr-l14_xtd10_zeroshot.py: has no train_dataloader, train_cfg and '
            r'optim_wrapper: a test-only config, nothing to train: evaluate it with '
            r'tools/test.py CONFIG')):
        train_tool.build_config(args)


def test_a_training_config_missing_one_of_its_keys_names_it(tmp_path):
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(tmp_path), '--amp',
                                  '--cfg-options', 'optim_wrapper=None'])
    with pytest.raises(UserError, match=(
            r'static_tiny-clip_synthetic.py: has no optim_wrapper: a training run needs all of '
            r'train_dataloader, train_cfg, optim_wrapper$')):
        train_tool.build_config(args)


@pytest.mark.parametrize('hooks, missing', [
    ("[dict(type='PhaseReportHook')]", "lacks WeightsOnlyCheckpointHook (its checkpoints "
     "would hold MMEngine's log objects, which tools/test.py and --resume refuse) and lacks "
     'RNGStateHook (a resumed run would draw other random numbers than the run it continues)'),
    ('None', 'lacks WeightsOnlyCheckpointHook (its checkpoints would hold MMEngine'),
    ("[dict(type='xmr.WeightsOnlyCheckpointHook')]", 'lacks RNGStateHook (a resumed run'),
    ("[*_base_.custom_hooks, dict(type='EMAHook')]", None),
    ("[dict(type='OwnRNGStateHook'), dict(type='WeightsOnlyCheckpointHook')]", None),
    # Types given as classes (MMEngine builds dict(type=<class>) too).
    ("[dict(type=__import__('xmr.engine.hooks').engine.hooks.RNGStateHook), "
     "dict(type=__import__('xmr.engine.hooks').engine.hooks.WeightsOnlyCheckpointHook)]", None),
])
def test_custom_hooks_that_drop_what_checkpoints_need_are_refused(tmp_path, hooks, missing):
    """A config's custom_hooks replaces its base's list: a user's one hook dropped xmr's, and
    the run's checkpoints then failed tools/test.py and --resume, the error blaming an old
    xmr. A subclass of one of them serves as it does."""
    from xmr.engine.hooks import RNGStateHook
    from xmr.registry import HOOKS

    child = tmp_path / 'own_hooks.py'
    child.write_text(f"_base_ = ['{DEMO}']\ncustom_hooks = {hooks}\n")
    args = train_tool.parse_args([str(child), '--work-dir', str(tmp_path / 'run')])
    HOOKS.register_module(name='OwnRNGStateHook', module=type('Own', (RNGStateHook,), {}))
    try:
        if missing is None:
            train_tool.build_config(args)
        else:
            with pytest.raises(UserError, match=re.escape(
                    f'own_hooks.py (custom_hooks): {missing}')) as refused:
                train_tool.build_config(args)
            assert str(refused.value).endswith(
                "; a config's custom_hooks replaces its base's list: add yours to the base's: "
                "custom_hooks = [*_base_.custom_hooks, dict(type='MyHook')]")
    finally:
        HOOKS.module_dict.pop('OwnRNGStateHook')
    assert not (tmp_path / 'run').exists()


def test_a_load_from_url_is_left_to_mmengine_to_download():
    train_tool.check_load_from('https://download.example.org/clip/iter_100.pth')
    train_tool.check_load_from(None)
    with pytest.raises(UserError, match=r'^nowhere.pth \(load_from\): no such file'):
        train_tool.check_load_from('nowhere.pth')


def test_a_run_keeps_torchs_fp32_matmuls_without_tf32(tmp_path):
    """docs/benchmarks.md, "Mixed precision": neither xmr nor MMEngine's runner set up for a
    run switches TF32 on, so a GPU run's fp32 matrix products are true fp32, as the CPU's."""
    from xmr.engine.runner import ResumeCheckedRunner

    cfg = train_tool.build_config(train_tool.parse_args([str(DEMO), '--work-dir',
                                                         str(tmp_path)]))
    ResumeCheckedRunner.from_cfg(cfg)
    assert torch.get_float32_matmul_precision() == 'highest'
    assert not torch.backends.cuda.matmul.allow_tf32
    assert torch.backends.cudnn.allow_tf32  # torch's default: convolutions may use TF32


def test_a_work_dir_that_is_the_configs_folder_keeps_the_config(tmp_path, capsys):
    """MMEngine dumps the config into the work dir under the config's name: trained from the
    config's own folder, the dump replaced the config (its _base_ and comments gone, the
    --cfg-options baked in)."""
    from xmr.engine.runner import ResumeCheckedRunner

    config = tmp_path / 'mine.py'
    text = f'_base_ = [{str(DEMO)!r}]  # my experiment\n'
    config.write_text(text)
    args = train_tool.parse_args([str(config), '--work-dir', str(tmp_path),
                                  '--cfg-options', 'randomness.seed=7'])
    ResumeCheckedRunner.from_cfg(train_tool.build_config(args))
    assert config.read_text() == text
    printed = capsys.readouterr()
    assert 'the config this run read, which the dump would replace' in printed.out + printed.err


def test_the_config_dump_records_the_seed_drawn_for_randomness_seed_none(tmp_path):
    """The dump said seed=None: run again, it drew another seed and trained another run; the
    seed used was in the log's environment lines alone."""
    from xmr.engine.runner import ResumeCheckedRunner

    args = train_tool.parse_args([str(DEMO), '--work-dir', str(tmp_path),
                                  '--cfg-options', 'randomness.seed=None'])
    runner = ResumeCheckedRunner.from_cfg(train_tool.build_config(args))
    assert runner.seed is not None
    assert Config.fromfile(tmp_path / DEMO.name).randomness.seed == runner.seed


@pytest.mark.slow
def test_a_resumed_runs_config_dump_records_the_seed_it_trains_with(tmp_path):
    """Resuming under another randomness.seed, MMEngine trains on with the checkpoint's seed
    (and warns); the dump beside the checkpoints, and the config the checkpoints keep, said the
    other seed."""
    work_dir = tmp_path / 'work'
    cfg = report_cfg(work_dir)
    config = tmp_path / 'tiny.py'
    cfg.dump(str(config))
    train_tool.main([str(config), '--work-dir', str(work_dir)])
    trained_seed = cfg.randomness.seed
    train_tool.main([str(config), '--work-dir', str(work_dir), '--resume', '--cfg-options',
                     f'randomness.seed={trained_seed + 5}'])
    assert Config.fromfile(work_dir / 'tiny.py').randomness.seed == trained_seed
    # A seed drawn for None is replaced without MMEngine's warning: the log says so.
    train_tool.main([str(config), '--work-dir', str(work_dir), '--resume', '--cfg-options',
                     'randomness.seed=None'])
    assert Config.fromfile(work_dir / 'tiny.py').randomness.seed == trained_seed
    log = max(work_dir.glob('*/*.log')).read_text()
    assert f"resumed: training with the checkpoint's seed {trained_seed}, not the " in log


def test_a_misspelt_option_of_an_adapter_is_refused_before_the_work_dir_is_made(tmp_path):
    """The model builds its adapters as the runner starts, which has made the work dir, its log
    and its config dump by then."""
    config, work_dir = tmp_path / 'typo.py', tmp_path / 'work'
    config.write_text(f"_base_ = ['{DEMO}']\n"
                      'model = dict(language_branch=dict(adapters=dict(hiddn=64)))\n')
    with pytest.raises(UnknownOptionError, match=(
            r"^model\.language_branch\.adapters\.hiddn: adapter StaticAdapter: unknown option "
            r"'hiddn' \(did you mean 'hidden'\?\)")):
        train_tool.main([str(config), '--work-dir', str(work_dir)])
    assert not work_dir.exists()


@pytest.mark.parametrize('base, model, refused', [
    ('dasd_tiny-clip_synthetic.py', "language_branch=dict(adapters=dict(type='StaticAdapter'))",
     "no adapter of the target branch reads the SDM's condition"),
    ('static_tiny-clip_synthetic.py', "language_branch=dict(languages=['de', 'eng'])",
     "source language 'en' is read by the frozen tower"),
    # The demo's tiny CLIP has a text tower of width 64 and 2 blocks.
    ('static_tiny-clip_synthetic.py', 'language_branch=dict(adapters=dict(blocks=[0, 5]))',
     re.escape('model.language_branch.adapters (StaticAdapter): blocks=[0, 5], an adapter '
               'placed at block 5, but the branch runs 2 blocks')),
    ('dasd_tiny-clip_synthetic.py', 'disentangler=dict(depth=5)',
     re.escape("SDM depth 5 is outside 0..2 (the text tower's blocks)")),
    # A prompt acts before the blocks, whatever their indices: 5 is beyond the branch's 2.
    *[('static_tiny-clip_synthetic.py',
       f"language_branch=dict(adapters=dict(_delete_=True, type='SoftPrompt', blocks={blocks}))",
       re.escape(f'model.language_branch.adapters (SoftPrompt): blocks={blocks} does not apply '
                 'to SoftPrompt, which acts once, at the input site, before the blocks (a '
                 'shallow prompt): drop blocks')) for blocks in ([0], [5])],
    # CDDS's UNets read the tiny CLIP's 64-wide tokens.
    ('../cdds/cdds_tiny-clip_synthetic.py', 'disentangler=dict(dim=128)',
     re.escape('model.disentangler.dim=128 but the backbone gives tokens of width 64 (its '
               "embed_dim); leave dim out (the backbone's is filled in)")),
    # Without a type, the options of the retriever's own preprocessor.
    ('static_tiny-clip_synthetic.py', 'data_preprocessor=dict(pad_multple=8)',
     re.escape("model.data_preprocessor.pad_multple: model RetrievalDataPreprocessor: unknown "
               "option 'pad_multple'; it takes non_blocking, source_prompt"))])
def test_a_model_the_config_alone_refuses_is_refused_before_the_work_dir_is_made(
        tmp_path, base, model, refused):
    """DASD's config with static adapters, English among the targets, options beyond the
    text tower and a misspelt preprocessor option were refused as the model built: after the
    runner had made the work dir and its log, and after the backbone (minutes with real
    weights) and the branch's tokenizer."""
    config, work_dir = tmp_path / 'refused.py', tmp_path / 'work'
    config.write_text(f"_base_ = ['{DEMO.parent / base}']\n"
                      f'model = dict({model})\n')
    with pytest.raises((ValueError, UnknownOptionError), match=f'^{refused}'):
        train_tool.main([str(config), '--work-dir', str(work_dir)])
    assert not work_dir.exists()


@pytest.mark.parametrize('earlier_run', [False, True])
def test_a_misspelt_phase_dataloader_key_is_refused_before_the_work_dir_is_written(
        tmp_path, earlier_run):
    """The loop resolved the key as the runner trained: after the runner had made the work dir
    (a work dir of an earlier run too), its timestamped log folder and its config dump."""
    work_dir = tmp_path / 'work'
    if earlier_run:  # one that stopped before its first checkpoint
        (work_dir / '20261201_000000').mkdir(parents=True)
        (work_dir / '20261201_000000' / '20261201_000000.log').write_text('phase 1\n')
    before = sorted(path.name for path in tmp_path.rglob('*'))
    with pytest.raises(ValueError, match=re.escape(
            "phase source_finetune: dataloader 'source_finetune_dataloadr' is no dataloader of "
            "the config (did you mean 'source_finetune_dataloader'?); the config has "
            "['source_finetune_dataloader', 'test_dataloader', 'train_dataloader', "
            "'val_dataloader']")):
        train_tool.main([str(DEMO), '--work-dir', str(work_dir), '--cfg-options',
                         'train_cfg.phases.0.dataloader=source_finetune_dataloadr'])
    assert sorted(path.name for path in tmp_path.rglob('*')) == before


def test_a_part_beyond_a_text_encoder_in_a_folder_is_refused_before_the_work_dir_is_made(
        tmp_path):
    """A BERT given by its folder told its shape only as it built, after the runner had made
    the work dir: its config is read as the config loads."""
    from tests.models.backbones.test_backbone_base import _saved_bert

    config, work_dir = tmp_path / 'bert.py', tmp_path / 'work'
    config.write_text(
        f"_base_ = ['{DEMO.parent.parent / 'cdds' / 'cdds_tiny-clip_synthetic.py'}']\n"
        "model = dict(disentangler=dict(dim=64), backbone=dict(\n"
        "    _delete_=True, type='ViTBERTBackbone', vision='vit_base_patch16_224',\n"
        "    vision_cfg=dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2),\n"
        f"    text='{_saved_bert(tmp_path / 'bert')}', embed_dim=16,\n"
        "    tokenizer=dict(type='SentencePieceTokenizer', vocab_size=48, corpus=['a b c'])))\n")
    with pytest.raises(ValueError, match=re.escape(
            'model.disentangler.dim=64 but the backbone gives tokens of width 16')):
        train_tool.main([str(config), '--work-dir', str(work_dir)])
    assert not work_dir.exists()


def test_the_help_of_work_dir_names_the_default_a_run_takes(tmp_path, capsys):
    """The help said work_dirs/<config name>, where a config's own work_dir comes first."""
    config = tmp_path / 'mine.py'
    config.write_text(f"_base_ = [{str(DEMO)!r}]\nwork_dir = {str(tmp_path / 'runs')!r}\n")
    assert train_tool.build_config(train_tool.parse_args([str(config)])).work_dir == \
        str(tmp_path / 'runs')
    # A row's run beside it, never in it: --resume auto would take the config's run up.
    row = tmp_path / 'seed-1.py'
    row.write_text('randomness = dict(seed=1)\n')
    assert train_tool.build_config(train_tool.parse_args(
        [str(config), '--ablation', str(row)])).work_dir == str(tmp_path / 'runs_seed-1')
    with pytest.raises(SystemExit):
        train_tool.parse_args(['--help'])
    work_dir = capsys.readouterr().out.split('--work-dir WORK_DIR ')[1].split('--resume')[0]
    assert ' '.join(work_dir.split()) == ("where logs and checkpoints go (default: the config's "
                                          'work_dir, else work_dirs/<config name>; either with '
                                          '[_<ablation>...])')


def test_a_cached_validation_gallery_without_its_hook_is_refused_before_the_runner(tmp_path):
    """Unprepared, the gallery's cache stopped the run at its first validation, a phase in."""
    config = tmp_path / 'cached.py'
    config.write_text(cached_gallery_config(
        tmp_path, "val_dataloader = dict(dataset=dict(_delete_=True, **{gallery}))"))
    args = train_tool.parse_args([str(config), '--work-dir', str(tmp_path / 'run')])
    with pytest.raises(ValueError, match='^val_dataloader.dataset is a CachedFeatureDataset'):
        train_tool.build_config(args)


def test_a_work_dir_that_is_a_file_is_named_with_its_key(tmp_path):
    """``os.makedirs`` said '<path>: File exists', naming neither --work-dir nor the fault."""
    taken = tmp_path / 'run'
    taken.write_text('a file')
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(taken)])
    with pytest.raises(UserError) as error:
        train_tool.build_config(args)
    assert str(error.value) == (f'{taken} (--work-dir): is a file, not a folder: give a folder '
                                'for the run (made if absent)')
    assert taken.read_text() == 'a file'


def test_a_work_dir_linked_to_a_missing_folder_is_named_as_such(tmp_path):
    """A link to a scratch disk not mounted passed the check, and os.makedirs then said 'File
    exists' once the config had loaded."""
    link = tmp_path / 'runs'
    link.symlink_to(tmp_path / 'scratch' / 'runs')
    args = train_tool.parse_args([str(DEMO), '--work-dir', str(link)])
    with pytest.raises(UserError) as error:
        train_tool.build_config(args)
    assert str(error.value) == (f"{link} (--work-dir): is a link to {tmp_path / 'scratch' / 'runs'}"
                                ', which does not exist: mount or make the folder it points to, '
                                'or give another')
    assert not (tmp_path / 'scratch').exists()


def run_config_with_a_test_split(tmp_path: Path) -> Path:
    """The phase report's tiny run (validated at the cross-lingual phase's start and each
    phase's end, best kept by mAR), its validation split its test split as well."""
    cfg = report_cfg(tmp_path / 'run')
    cfg.test_dataloader, cfg.test_evaluator = cfg.val_dataloader, cfg.val_evaluator
    cfg.test_cfg, cfg.log_level = dict(type='TestLoop'), 'INFO'
    cfg.default_hooks.checkpoint.update(save_best='mAR', rule='greater')
    config = tmp_path / 'tiny.py'
    cfg.dump(str(config))
    return config


@pytest.mark.parametrize('which', ['last', 'best'])
def test_test_after_training_scores_the_checkpoint_it_names_as_the_test_tool_does(
        tmp_path, capsys, monkeypatch, which):
    """Both runners start in one second, as a short run's may: MMEngine names its logger after
    the config and that second, and handed the test the training's log file."""
    import mmengine.runner.runner as mmengine_runner

    from tests.tools.test_test_tool import load_tool

    second = mmengine_runner.time.time()
    monkeypatch.setattr(mmengine_runner, 'time', SimpleNamespace(
        time=lambda: second, localtime=mmengine_runner.time.localtime,
        strftime=mmengine_runner.time.strftime))
    config = run_config_with_a_test_split(tmp_path)
    work_dir = tmp_path / 'run'
    options = ['train_cfg.phases.1.lr=0.003', 'randomness.seed=4']
    train_tool.main([str(config), '--test', which, '--cfg-options', *options])

    best = sorted(work_dir.glob('best_mAR_iter_*.pth'))
    assert len(best) == 1
    tested = work_dir / 'iter_16.pth' if which == 'last' else best[0]
    result = json.loads(tested.with_name(f'{tested.stem}_test.json').read_text())
    assert result['checkpoint'] == str(tested)
    assert result['command'] == shlex.join(['tools/test.py', str(config), str(tested),
                                            '--cfg-options', *options])
    assert result['seed'] == 4
    row = f'| tiny ({tested.stem}, seed 4) '
    assert any(line.startswith(row) for line in capsys.readouterr().out.splitlines())
    assert '(test) [' not in next(work_dir.glob('2*/2*.log')).read_text()
    assert '(test) [' in next((work_dir / 'test').glob('2*/2*.log')).read_text()

    monkeypatch.undo()  # the test alone starts in a second of its own
    load_tool().main([str(config), str(tested), '--out', str(tmp_path / 'alone.json'),
                      '--cfg-options', *options])
    assert result['metrics'] == json.loads((tmp_path / 'alone.json').read_text())['metrics']


@pytest.mark.parametrize('which, options, refused', [
    ('last', ['test_dataloader=None', 'test_evaluator=None', 'test_cfg=None'],
     r'tiny.py: has no test_dataloader, test_evaluator and test_cfg: --test has no test split'),
    ('last', ['default_hooks.checkpoint=None'],
     r'^default_hooks.checkpoint: is None: the run saves no checkpoint for --test last'),
    ('last', ['default_hooks.checkpoint.save_last=False'],
     r'^default_hooks.checkpoint.save_last: is False: the final weights that --test tests'),
    ('best', ['default_hooks.checkpoint.save_best=None'],
     r"^default_hooks.checkpoint.save_best: is None: --test best tests the checkpoint of the "
     r"best validation by one metric: validate and name one metric \(save_best='mAR'\)"),
    ('best', ['default_hooks.checkpoint.save_best=[mAR,rSum]'],
     r"^default_hooks.checkpoint.save_best: is \['mAR', 'rSum'\]: --test best"),
    ('best', ['val_dataloader=None', 'val_evaluator=None', 'val_cfg=None'],
     r"^default_hooks.checkpoint.save_best: is 'mAR' and the config has no val_dataloader: "),
])
def test_test_after_training_is_refused_before_the_run_where_it_has_nothing_to_test(
        tmp_path, which, options, refused):
    config = run_config_with_a_test_split(tmp_path)
    args = train_tool.parse_args([str(config), '--test', which, '--cfg-options', *options])
    with pytest.raises(UserError, match=refused):
        train_tool.build_config(args)
    assert not (tmp_path / 'run').exists()


def run_config_testing_what_it_trains_on(tmp_path: Path) -> Path:
    """The tiny run with a test split (:func:`run_config_with_a_test_split`) whose test gallery
    is four images its ``train_dataloader`` reads the captions of too."""
    from tests.tools.test_test_tool import TINY
    from xmr.datasets import dump_annotation
    from xmr.datasets.annotation import Annotation, MediaRecord

    names = [f'{i}.png' for i in range(4)]
    dump_annotation(Annotation(dataset='d', split='test', media_type='image',
                               languages=['en', 'de'], source_lang='en',
                               items=[MediaRecord(name, name, {'en': [f'a {name}'],
                                                               'de': [f'ein {name}']})
                                      for name in names]), tmp_path / 'd_test.json')
    config = run_config_with_a_test_split(tmp_path)
    cfg = Config.fromfile(config)
    media = dict(ann_file=str(tmp_path / 'd_test.json'), with_media=False,
                 data_prefix=dict(media=str(tmp_path / 'images')), transform=TINY)
    cfg.test_dataloader.dataset = dict(type='RetrievalDataset', test_mode=True, **media)
    cfg.train_dataloader.dataset = dict(type='CaptionPairDataset', target_field='captions',
                                        **media)
    cfg.dump(str(config))
    return config


def test_test_after_training_of_a_test_split_it_trains_on_is_refused_before_the_run(
        tmp_path, capsys, monkeypatch):
    """The test refused it (check_test_held_out) only once the whole training had run."""
    from xmr.engine.runner import ResumeCheckedRunner
    from xmr.registry import DATASETS
    from xmr.utils.cli import EXIT_ERROR, run_tool

    config = run_config_testing_what_it_trains_on(tmp_path)
    with pytest.raises(SystemExit) as exit_status:
        run_tool(train_tool.main, [str(config), '--test'])
    assert exit_status.value.code == EXIT_ERROR
    error = capsys.readouterr().err
    ann_file = tmp_path / 'd_test.json'
    assert error.startswith(
        f'error: test dataset 0 (RetrievalDataset) ({ann_file}) shares 4 of its 4 media files '
        f'with training dataset train_dataloader.dataset ({ann_file}), e.g. 0.png, 1.png, '
        '2.png, 3.png: ')
    assert error.rstrip().endswith('allowed by train_cfg.allow_eval_overlap=True')
    assert not (tmp_path / 'run').exists()  # no iteration ran, no checkpoint was written

    # The opt-out builds no dataset to check: the run goes on to build its runner.
    def runner_built(cls, cfg):
        raise RuntimeError('the runner is built')

    built = []
    monkeypatch.setattr(DATASETS, 'build', lambda *args, **kwargs: built.append(args))
    monkeypatch.setattr(ResumeCheckedRunner, 'from_cfg', classmethod(runner_built))
    with pytest.raises(RuntimeError, match='the runner is built'):
        train_tool.main([str(config), '--test', '--cfg-options',
                         'train_cfg.allow_eval_overlap=True'])
    assert built == []


def test_test_best_after_a_run_that_never_validated_names_the_run_and_keeps_it(tmp_path):
    config = run_config_with_a_test_split(tmp_path)
    with pytest.raises(UserError, match=r'run: the run saved no best checkpoint for --test to '
                       r'test \(no validation ran, or none reported a number: NaN is never the '
                       r'best\): test a checkpoint by path'):
        train_tool.main([str(config), '--test', 'best', '--cfg-options',
                         'train_cfg.validate_at_phase_end=False',
                         'train_cfg.phases.1.validate_at_start=False'])
    assert (tmp_path / 'run' / 'iter_16.pth').is_file()
    assert not list((tmp_path / 'run').glob('*_test.json'))


def test_test_last_after_a_run_a_hook_stopped_early_is_refused_naming_the_stop(tmp_path):
    """EarlyStoppingHook ends the loop before its last iteration, which save_last saves: the
    last checkpoint was an earlier iteration's, tested as if it held the final weights."""
    from mmengine.hooks import CheckpointHook
    from mmengine.logging import MessageHub

    def runner(stopped_at: int, last: str) -> SimpleNamespace:
        hub = MessageHub(f'stopped_{stopped_at}_{last}')
        hub.update_info('last_ckpt', str(tmp_path / last))
        return SimpleNamespace(message_hub=hub, iter=stopped_at, max_iters=12,
                               work_dir=str(tmp_path),
                               hooks=[CheckpointHook(interval=3, by_epoch=False)])

    with pytest.raises(UserError, match=r'iter_3.pth: is the last checkpoint, but training '
                       'stopped at iteration 4 of 12 .* test the best validation'):
        train_tool.tested_checkpoint(runner(4, 'iter_3.pth'), 'last')
    assert train_tool.tested_checkpoint(runner(6, 'iter_6.pth'), 'last').endswith('iter_6.pth')
    assert train_tool.tested_checkpoint(runner(12, 'iter_12.pth'), 'last').endswith('iter_12.pth')


def _train_and_test_on_rank(rank: int, port: int, config: str) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE='2', LOCAL_RANK=str(rank))
    train_tool.main([config, '--launcher', 'pytorch', '--test'])


def test_test_after_training_under_the_launcher_scores_as_one_process(tmp_path, monkeypatch):
    """Every rank tests the checkpoint the main process wrote, in the process group the
    training started."""
    from tests.engine.test_distributed import free_port
    from tests.tools.test_test_tool import load_tool
    from xmr.registry import MODELS

    MODELS.import_from_location()
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    config = run_config_with_a_test_split(tmp_path)
    cfg = Config.fromfile(config)
    cfg.custom_hooks = [hook for hook in cfg.custom_hooks if hook.type != 'RecordingHook']
    cfg.dump(str(config))
    mp.start_processes(_train_and_test_on_rank, args=(free_port(), str(config)), nprocs=2,
                       join=True, start_method='fork')
    tested = tmp_path / 'run' / 'iter_16.pth'
    result = json.loads(tested.with_name('iter_16_test.json').read_text())
    assert result['command'] == shlex.join(['tools/test.py', str(config), str(tested),
                                            '--launcher', 'pytorch'])
    load_tool().main([str(config), str(tested), '--out', str(tmp_path / 'alone.json')])
    assert result['metrics'] == json.loads((tmp_path / 'alone.json').read_text())['metrics']


@pytest.mark.parametrize('moved', [False, True])
def test_test_after_a_run_resumed_at_its_end_tests_the_checkpoint_it_resumed_from(
        tmp_path, moved):
    """Nothing trains, nothing is saved: the checkpoint records itself as the last one, by the
    absolute path it was written to, which a moved work dir reads as its own file."""
    config = run_config_with_a_test_split(tmp_path)
    train_tool.main([str(config)])
    work_dir = (tmp_path / 'run').rename(tmp_path / 'moved') if moved else tmp_path / 'run'
    train_tool.main([str(config), '--work-dir', str(work_dir), '--resume', '--test'])
    result = json.loads((work_dir / 'iter_16_test.json').read_text())
    assert result['checkpoint'] == str(work_dir / 'iter_16.pth')


def test_test_after_a_run_tested_before_shows_that_result_and_keeps_any_other(
        tmp_path, capsys):
    """A job requeued with --resume auto --test after it ended met its own result, and the
    test tool's advice (--overwrite, --out) named options the train tool does not have."""
    config = run_config_with_a_test_split(tmp_path)
    train_tool.main([str(config), '--resume', 'auto', '--test'])
    tested = tmp_path / 'run' / 'iter_16.pth'
    result = tested.with_name('iter_16_test.json')
    written, text = result.stat().st_mtime_ns, result.read_text()
    capsys.readouterr()

    train_tool.main([str(config), '--resume', 'auto', '--test'])
    assert (result.stat().st_mtime_ns, result.read_text()) == (written, text)
    captured = capsys.readouterr()
    assert any(line.startswith('| tiny (iter_16, seed ') for line in captured.out.splitlines())
    assert f'{tested} was tested before by this command' in captured.out + captured.err

    command = shlex.join(['tools/test.py', str(config), str(tested), '--cfg-options',
                          'randomness.seed=4'])
    with pytest.raises(UserError, match=re.escape(
            f'{result}: exists and is kept (an earlier test of the checkpoint, with other '
            f'options, or another file); the training is done: test the checkpoint with '
            f'{command} --overwrite (replacing an earlier result) or --out OTHER.json')):
        train_tool.main([str(config), '--resume', '--test', '--cfg-options', 'randomness.seed=4'])
    os.utime(tested)  # a checkpoint written after the result is not the one it scored
    with pytest.raises(UserError, match='exists and is kept'):
        train_tool.main([str(config), '--resume', '--test'])
    assert (result.stat().st_mtime_ns, result.read_text()) == (written, text)


def test_runs_started_in_one_second_of_one_process_log_into_their_own_files(
        tmp_path, monkeypatch):
    """MMEngine handed the second runner of a name started in one second the first's logger
    (its file) and message hub (its last checkpoint)."""
    import mmengine.runner.runner as mmengine_runner

    second = mmengine_runner.time.time()
    monkeypatch.setattr(mmengine_runner, 'time', SimpleNamespace(
        time=lambda: second, localtime=mmengine_runner.time.localtime,
        strftime=mmengine_runner.time.strftime))
    config = run_config_with_a_test_split(tmp_path)
    for run in ('first', 'second'):
        train_tool.main([str(config), '--work-dir', str(tmp_path / run), '--cfg-options',
                         'train_cfg.validate_at_phase_end=False',
                         'train_cfg.phases.1.validate_at_start=False'])
    logs = {run: list((tmp_path / run).glob('2*/2*.log')) for run in ('first', 'second')}
    assert [len(files) for files in logs.values()] == [1, 1]
    assert str(tmp_path / 'second') not in logs['first'][0].read_text()
    assert f"Checkpoints will be saved to {tmp_path / 'second'}" in logs['second'][0].read_text()


@pytest.mark.parametrize('split, flags', [('val', []), ('test', ['--test'])])
def test_an_annotation_file_not_yet_made_is_named_before_the_work_dir_is_written(
        tmp_path, split, flags):
    """The runner built the dataset after the model, into a work dir it had written."""
    config = tmp_path / 'unconverted.py'
    config.write_text(f"_base_ = [{str(DEMO)!r}]\n{split}_dataloader = dict(dataset=dict("
                      "_delete_=True, type='RetrievalDataset', data_root='data/multi30k', "
                      f"ann_file='annotations/multi30k_{split}.json'))\n")
    work_dir = tmp_path / 'run'
    with pytest.raises(FileNotFoundError, match=re.escape(
            f'annotation file not found: data/multi30k/annotations/multi30k_{split}.json '
            f'({split}_dataloader.dataset.ann_file), relative to the working directory '
            f'{os.getcwd()}: check ann_file and data_root')):
        train_tool.main([str(config), '--work-dir', str(work_dir), *flags])
    assert not work_dir.exists()


#: Holds the runner's build (:func:`~tests.conftest.terminated_while_held`): before the
#: training, and PreemptionHook's handler, start.
HELD_AT_THE_RUNNER = '''
from xmr.engine.runner import ResumeCheckedRunner
def held(cls, cfg):
    ready.write_text('building the runner')
    time.sleep(60)
ResumeCheckedRunner.from_cfg = classmethod(held)
'''


def test_sigterm_before_the_training_gives_back_the_work_dir_lock(tmp_path):
    """SIGTERM while the runner was built (minutes for a large model, its data) killed the run
    silently (exit -15), its work dir's lock left for the next run to find out and take over
    with a warning; during the training PreemptionHook's own handler stops it (tests/faults)."""
    from xmr.engine.work_dir import LOCK_NAME

    work_dir = tmp_path / 'run'

    def locked() -> None:
        assert (work_dir / LOCK_NAME).exists()

    terminated_while_held(HELD_AT_THE_RUNNER, REPO / 'tools' / 'train.py',
                          [str(DEMO), '--work-dir', str(work_dir)], tmp_path / 'ready',
                          at_ready=locked)
    assert not (work_dir / LOCK_NAME).exists()
