"""xmr's CheckpointHook: atomic files, the previous best kept until its successor exists,
stale temporaries cleaned, strict resume."""
from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mmengine.hooks import Hook
from mmengine.runner import Runner, ValLoop

import xmr.fileio
from tests.conftest import tiny_branch_cfg, tiny_dasd_cfg, tiny_retriever_cfg
from tests.engine.test_loops import (
    PHASES,
    RecordingHook,
    make_cfg,
    train,
    train_runner,
    with_validation,
)
from xmr.engine.checkpoint import CheckpointReadError, allow_mmengine_checkpoint_types
from xmr.engine.hooks import CheckpointHook
from xmr.engine.hooks import checkpoint as checkpoint_hook
from xmr.models.retrievers.checkpoint_facts import decode_facts
from xmr.registry import MODELS
from xmr.version import provenance


def runner_with_hook(work_dir: Path, **hook_args) -> tuple[Runner, CheckpointHook]:
    cfg = make_cfg(work_dir)
    cfg.default_hooks.checkpoint.update(hook_args)
    runner = Runner.from_cfg(cfg)
    runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
    hook = next(h for h in runner.hooks if isinstance(h, CheckpointHook))
    hook.before_train(runner)
    return runner, hook


def fail_fsync_with_enospc(monkeypatch) -> None:
    def no_space(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(xmr.fileio.os, 'fsync', no_space)


def loads(path: Path) -> bool:
    allow_mmengine_checkpoint_types()
    return 'state_dict' in torch.load(path, map_location='cpu', weights_only=True)


def test_the_hook_of_xmr_configs_is_xmrs():
    from xmr.registry import HOOKS
    assert HOOKS.get('CheckpointHook') is CheckpointHook


def test_a_best_checkpoint_that_fails_to_write_keeps_the_previous_best(tmp_path, monkeypatch):
    runner, hook = runner_with_hook(tmp_path, save_best='mAR', rule='greater')
    hook._save_best_checkpoint(runner, {'mAR': 1.0})
    first = tmp_path / 'best_mAR_iter_0.pth'
    assert loads(first)

    runner.train_loop._iter = 5
    with monkeypatch.context() as patch:
        fail_fsync_with_enospc(patch)
        with pytest.raises(OSError, match=r'best_mAR_iter_5\.pth: writing failed \(No space'):
            hook._save_best_checkpoint(runner, {'mAR': 2.0})
    assert loads(first)
    assert not (tmp_path / 'best_mAR_iter_5.pth').exists()
    assert not list(tmp_path.glob('.*.tmp'))
    assert hook.best_ckpt_path == str(first)

    runner.train_loop._iter = 6
    hook._save_best_checkpoint(runner, {'mAR': 3.0})
    assert loads(tmp_path / 'best_mAR_iter_6.pth')
    assert not first.exists()



def test_save_best_auto_takes_the_first_metric_as_mmengine_does(tmp_path):
    """It failed at the first validation with KeyError: 'auto'."""
    runner, hook = runner_with_hook(tmp_path, save_best='auto', rule='greater')
    hook._save_best_checkpoint(runner, {'mAR': 1.0, 'rSum': 9.0})
    assert hook.key_indicators == ['mAR'] and loads(tmp_path / 'best_mAR_iter_0.pth')
    runner.train_loop._iter = 4
    hook._save_best_checkpoint(runner, {'mAR': 2.0, 'rSum': 1.0})
    assert sorted(path.name for path in tmp_path.glob('best_*.pth')) == ['best_mAR_iter_4.pth']


def test_a_nan_validation_is_never_the_best_and_is_warned_of(tmp_path, monkeypatch):
    """MMEngine compared NaN False with every best and said nothing: a run whose metric was
    NaN saved no best, and --test best then said that no validation ran."""
    runner, hook = runner_with_hook(tmp_path, save_best='mAR', rule='greater')
    warned = []
    monkeypatch.setattr(runner.logger, 'warning', warned.append)
    hook._save_best_checkpoint(runner, {'mAR': 1.0})
    runner.train_loop._iter = 5
    hook._save_best_checkpoint(runner, {'mAR': float('nan')})
    assert warned == ["save_best 'mAR' is NaN at iteration 5; this validation cannot be the "
                      'best']
    assert hook.best_ckpt_path == str(tmp_path / 'best_mAR_iter_0.pth')
    assert not (tmp_path / 'best_mAR_iter_5.pth').exists()


def test_a_fork_never_removes_the_best_checkpoint_of_the_run_it_resumed_from(tmp_path):
    """A run resumed from another work dir's checkpoint inherits its best path (the message
    hub's); its own better best must not delete the other run's file."""
    source, _ = runner_with_hook(tmp_path / 'source', save_best='mAR', rule='greater')
    runner, hook = runner_with_hook(tmp_path / 'fork', save_best='mAR', rule='greater')
    hook._save_best_checkpoint(source, {'mAR': 1.0})  # the source run's best, in its own dir
    theirs = tmp_path / 'fork' / 'best_mAR_iter_0.pth'
    theirs = theirs.rename(tmp_path / 'source' / theirs.name)
    hook.best_ckpt_path = str(theirs)  # as MMEngine restores it from the fork's checkpoint
    runner.train_loop._iter = 4
    hook._save_best_checkpoint(runner, {'mAR': 2.0})
    assert loads(tmp_path / 'fork' / 'best_mAR_iter_4.pth')
    assert loads(theirs)  # the other run keeps its best
    runner.train_loop._iter = 8
    hook._save_best_checkpoint(runner, {'mAR': 3.0})
    assert not (tmp_path / 'fork' / 'best_mAR_iter_4.pth').exists()  # its own: replaced

def test_the_oldest_kept_checkpoint_goes_only_after_its_successor_is_written(tmp_path,
                                                                             monkeypatch):
    runner, hook = runner_with_hook(tmp_path, max_keep_ckpts=1)
    runner.train_loop._iter = 3
    hook._save_checkpoint(runner)
    with monkeypatch.context() as patch:
        fail_fsync_with_enospc(patch)
        runner.train_loop._iter = 7
        with pytest.raises(OSError, match=r'iter_8\.pth: writing failed'):
            hook._save_checkpoint(runner)
    assert loads(tmp_path / 'iter_4.pth')
    assert not (tmp_path / 'iter_8.pth').exists()

    hook._save_checkpoint(runner)
    assert loads(tmp_path / 'iter_8.pth')
    assert not (tmp_path / 'iter_4.pth').exists()
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path / 'iter_8.pth')


def test_a_full_disk_while_last_checkpoint_is_written_leaves_it_naming_the_previous_one(
        tmp_path, monkeypatch):
    """The checkpoint is written, its pointer is not: ``--resume`` must still find the previous
    checkpoint, which stays."""
    runner, hook = runner_with_hook(tmp_path, max_keep_ckpts=1)
    runner.train_loop._iter = 3
    hook._save_checkpoint(runner)
    real_open = open

    class FullDisk:
        """An open file on a full disk: opened (and truncated, for 'w'), no byte written."""

        def __init__(self, handle) -> None:
            self.handle = handle

        def write(self, data) -> None:
            raise OSError(errno.ENOSPC, 'No space left on device')

        writelines = write  # atomic_write_text writes its pieces so

        def __enter__(self):
            return self

        def __exit__(self, *exc_info) -> None:
            self.handle.close()

        def __getattr__(self, name):
            return getattr(self.handle, name)

    def opening(file, mode='r', *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        full = 'last_checkpoint' in os.path.basename(str(file)) and 'w' in mode
        return FullDisk(handle) if full else handle

    with monkeypatch.context() as patch:
        patch.setattr('builtins.open', opening)
        runner.train_loop._iter = 7
        with pytest.raises(OSError, match=r'last_checkpoint: writing failed \(No space'):
            hook._save_checkpoint(runner)
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path / 'iter_4.pth')
    assert loads(tmp_path / 'iter_4.pth')
    assert not list(tmp_path.glob('.*.tmp'))


def test_partial_files_of_a_killed_run_are_removed_when_training_starts(tmp_path):
    dead = subprocess.Popen([sys.executable, '-c', 'pass'])
    dead.wait()
    stale = tmp_path / f'.iter_4.pth.{dead.pid}.tmp'
    stale.write_bytes(b'truncated')
    alive = tmp_path / f'.iter_4.pth.{os.getpid()}.tmp'  # this process: still writing
    alive.write_bytes(b'being written')
    runner_with_hook(tmp_path)
    assert not stale.exists()
    assert alive.exists()


def test_resume_with_other_adapter_shapes_is_refused_naming_keys_and_shapes(tmp_path):
    torch.manual_seed(0)
    train(make_cfg(tmp_path, phases=PHASES[:1], checkpoint_interval=2, stop_after=2))
    cfg = make_cfg(tmp_path, phases=PHASES[:1], resume_from=tmp_path / 'iter_2.pth')
    cfg.model.language_branch.adapters.hidden = 16
    with pytest.raises(ValueError) as error:
        train(cfg)
    message = str(error.value)
    assert 'cannot resume from' in message and 'iter_2.pth' in message
    # 2 languages x 3 blocks x (down.weight, down.bias, up.weight); up.bias keeps its shape.
    assert '18 keys of other shapes: language_branch.adapters.sets.de.0:block_output.down.bias ' \
        '(checkpoint [8], model [16]), ' in message
    assert ' and 15 more' in message
    assert 'missing' not in message


def test_every_checkpoint_records_the_xmr_that_wrote_it_and_a_refused_resume_names_it(
        tmp_path):
    """A checkpoint of a newer xmr, with a weight this one lacks, was refused naming the key
    alone."""
    runner, hook = runner_with_hook(tmp_path, save_best='mAR', rule='greater')
    runner.train_loop._iter = 3
    hook._save_checkpoint(runner)
    hook._save_best_checkpoint(runner, {'mAR': 1.0})
    allow_mmengine_checkpoint_types()
    for name in ('iter_4.pth', 'best_mAR_iter_3.pth'):
        meta = torch.load(tmp_path / name, map_location='cpu', weights_only=True)['meta']
        assert {key: meta[key] for key in provenance()} == provenance(), name
    newer = dict(xmr_version='0.2.0', xmr_commit='0123abc')
    runner._resume = True
    with pytest.raises(ValueError) as error:
        hook.after_load_checkpoint(runner, resumable(dict(
            runner.model.state_dict(), **{'language_branch.gate': torch.zeros(1)}), **newer))
    assert ('1 keys the model does not have: language_branch.gate\nthe checkpoint was written '
            f'by xmr 0.2.0 (commit 0123abc); read by xmr {xmr.__version__} ('
            in str(error.value))


def test_a_step_saved_twice_keeps_its_file_and_is_kept_once(tmp_path):
    """A signal's save after the periodic one of the same iteration, say."""
    runner, hook = runner_with_hook(tmp_path, max_keep_ckpts=1)
    runner.train_loop._iter = 3
    hook._save_checkpoint(runner)
    hook._save_checkpoint(runner)
    assert loads(tmp_path / 'iter_4.pth')
    assert list(hook.keep_ckpt_ids) == [4]


def test_each_checkpoint_holds_the_ids_kept_with_it_in_place(tmp_path):
    """What a resumed run reads to remove the older ones (MMEngine's before_train)."""
    runner, hook = runner_with_hook(tmp_path, max_keep_ckpts=2)
    for done in (3, 7, 11):
        runner.train_loop._iter = done
        hook._save_checkpoint(runner)
    allow_mmengine_checkpoint_types()
    kept = {path.name: torch.load(path, map_location='cpu', weights_only=True)
            ['message_hub']['runtime_info']['keep_ckpt_ids'] for path in tmp_path.glob('*.pth')}
    assert kept == {'iter_8.pth': [4, 8], 'iter_12.pth': [8, 12]}


def test_every_periodic_save_first_calls_the_hooks_on_every_rank(tmp_path):
    runner, hook = runner_with_hook(tmp_path)
    called = []

    class Gatherer(Hook):
        def before_checkpoint_on_every_rank(self, runner) -> None:
            called.append(runner.iter)

    runner.register_hook(Gatherer())
    runner.train_loop._iter = 3
    hook._save_checkpoint(runner)
    assert called == [3]


def adapter_weights_of_other_shapes(runner) -> dict:
    return {key: torch.zeros(value.shape[0] + 1, *value.shape[1:]) if 'down.weight' in key
            else value for key, value in runner.model.state_dict().items()}


def resumable(state_dict: dict, **meta) -> dict:
    """A checkpoint of training holding ``state_dict``: what a resume reads besides the
    weights, ``meta`` added to its ``meta``."""
    return dict(state_dict=state_dict, meta=dict(epoch=0, iter=4, **meta), message_hub={})


def test_only_a_resume_refuses_weights_that_do_not_fit(tmp_path):
    runner, hook = runner_with_hook(tmp_path)
    checkpoint = resumable(adapter_weights_of_other_shapes(runner))
    runner._resume = False  # load_from alone: MMEngine's lenient loading
    hook.after_load_checkpoint(runner, checkpoint)
    runner._resume = True
    with pytest.raises(ValueError, match='its weights do not fit the model of this config'):
        hook.after_load_checkpoint(runner, checkpoint)


def test_a_load_from_that_holds_none_of_the_models_weights_is_refused_naming_its_keys(
        tmp_path):
    """MMEngine's lenient load lists every key as missing and trains from random weights."""
    runner, hook = runner_with_hook(tmp_path)
    runner._resume, runner._load_from = False, 'other.pth'
    weights = runner.model.state_dict()
    for foreign in (dict(model=weights), dict(state_dict={'visual.proj': torch.zeros(2)})):
        with pytest.raises(ValueError, match=(
                r"^load_from=other.pth: none of its 1 entries is a weight of this model \(its "
                r"keys: (model|visual.proj); the model's: [^_].*\): give a checkpoint "
                r"tools/train.py wrote for this config's model")):
            hook.after_load_checkpoint(runner, foreign)
    weight = next(key for key in weights if key != '_extra_state')
    hook.after_load_checkpoint(runner, dict(state_dict={
        f'module.{weight}': weights[weight]}))  # one is enough
    hook.after_load_checkpoint(runner, weights)  # a bare state dict, as MMEngine loads it


def test_a_resume_takes_weights_saved_with_the_ddp_module_prefix(tmp_path):
    runner, hook = runner_with_hook(tmp_path)
    runner._resume = True
    hook.after_load_checkpoint(runner, resumable({
        f'module.{key}': value for key, value in runner.model.state_dict().items()}))
    with pytest.raises(ValueError, match=r'\d+ keys of other shapes: language_branch'):
        hook.after_load_checkpoint(runner, resumable({
            f'module.{key}': value
            for key, value in adapter_weights_of_other_shapes(runner).items()}))


@pytest.mark.parametrize('kind', ['bare state dict', 'phase_best file', 'converted model'])
def test_a_resume_from_weights_alone_is_refused_naming_the_file_and_load_from(tmp_path, kind):
    """MMEngine's resume met a converted model with KeyError: 'epoch', a bare state dict (a
    phase_best/ file) with KeyError: 'meta' (or 'message_hub'), once the run was built; and
    the strict resume called every weight of a bare state dict missing."""
    runner, hook = runner_with_hook(tmp_path)
    runner._resume, runner._load_from = True, 'weights.pth'
    weights = runner.model.state_dict()
    checkpoint, lacks = {
        'bare state dict': (weights, 'state_dict, message_hub, meta.epoch, meta.iter'),
        'phase_best file': ({k: v for k, v in weights.items() if 'language_branch' in k},
                            'state_dict, message_hub, meta.epoch, meta.iter'),
        'converted model': (dict(state_dict=weights, meta=dict(converted_from='dasd.pth')),
                            'message_hub, meta.epoch, meta.iter')}[kind]
    with pytest.raises(CheckpointReadError, match=(
            rf'^weights.pth: not a checkpoint to resume from: it has no {lacks}, which a '
            r'checkpoint of training holds .* start a new run from these weights: '
            r'load_from=weights.pth without --resume$')):
        hook.after_load_checkpoint(runner, checkpoint)


def test_a_moved_work_dir_takes_its_own_best_and_replaces_it_with_a_better_one(tmp_path):
    """The message hub names the best by the absolute path the run wrote it to; a work dir
    moved (or copied) elsewhere resumes with its own file of that name, as it does with
    last_checkpoint's, and a better best replaces it instead of leaving two."""
    runner, hook = runner_with_hook(tmp_path / 'written', save_best='mAR', rule='greater')
    runner.train_loop._iter = 4
    hook._save_best_checkpoint(runner, {'mAR': 1.0})
    written = Path(hook.best_ckpt_path)
    moved = (tmp_path / 'written').rename(tmp_path / 'moved')
    runner, hook = runner_with_hook(moved, save_best='mAR', rule='greater')
    runner.message_hub.update_info('best_ckpt', str(written))  # as the resumed hub says
    hook.before_train(runner)
    runner.train_loop._iter = 8
    hook._save_best_checkpoint(runner, {'mAR': 2.0})
    assert sorted(path.name for path in moved.glob('best_*.pth')) == ['best_mAR_iter_8.pth']


def test_a_new_run_replaces_the_best_of_a_run_stopped_before_its_first_checkpoint(tmp_path):
    """The stopped run's best of each key goes once this run saves its own of that key; a
    file of a key this run did not save, or not named to it, stays."""
    for name in ('best_mAR_iter_300.pth', 'best_rSum_iter_300.pth', 'best_mAR_iter_9.pth'):
        torch.save({'state_dict': {}}, tmp_path / name)
    runner, hook = runner_with_hook(
        tmp_path, save_best=['mAR', 'rSum'], rule=['greater'] * 2,
        earlier_best=['best_mAR_iter_300.pth', 'best_rSum_iter_300.pth'])
    runner.train_loop._iter = 100
    hook._save_best_checkpoint(runner, {'mAR': 1.0, 'rSum': float('nan')})
    assert sorted(path.name for path in tmp_path.glob('best_*.pth')) == [
        'best_mAR_iter_100.pth', 'best_mAR_iter_9.pth', 'best_rSum_iter_300.pth']
    runner.train_loop._iter = 300  # the same name as the stopped run's: saved, kept
    hook._save_best_checkpoint(runner, {'mAR': 0.5, 'rSum': 2.0})
    assert sorted(path.name for path in tmp_path.glob('best_*.pth')) == [
        'best_mAR_iter_100.pth', 'best_mAR_iter_9.pth', 'best_rSum_iter_300.pth']
    assert loads(tmp_path / 'best_rSum_iter_300.pth')
    # Its end marks the work dir's run finished; the next new run there unmarks it.
    hook.after_train(runner)
    assert (tmp_path / '.train_finished').read_text() == f'{runner.iter}\n'
    hook.before_train(runner)
    assert not (tmp_path / '.train_finished').exists()
    resumed, hook = runner_with_hook(tmp_path / 'resumed', save_best='mAR', rule='greater',
                                     earlier_best=['best_mAR_iter_9.pth'])
    assert hook._earlier_best  # a new run takes them; a resumed one does not
    resumed._resume = True
    hook.before_train(resumed)
    assert hook._earlier_best == []


def test_a_moved_work_dir_records_its_own_best_of_each_of_several_keys(tmp_path):
    """With several save_best keys the hub names each key's best as 'best_ckpt_<key>': the
    file a moved work dir takes over is recorded there, so its next checkpoint carries it."""
    keys = ['mAR', 'rSum']
    runner, hook = runner_with_hook(tmp_path / 'written', save_best=keys, rule=['greater'] * 2)
    runner.train_loop._iter = 4
    hook._save_best_checkpoint(runner, {'mAR': 1.0, 'rSum': 3.0})
    written = dict(hook.best_ckpt_path_dict)
    moved = (tmp_path / 'written').rename(tmp_path / 'moved')
    runner, hook = runner_with_hook(moved, save_best=keys, rule=['greater'] * 2)
    for key, path in written.items():  # as the resumed hub says
        runner.message_hub.update_info(f'best_ckpt_{key}', path)
    hook.before_train(runner)
    for key in keys:
        own = str(moved / f'best_{key}_iter_4.pth')
        assert hook.best_ckpt_path_dict[key] == own
        assert runner.message_hub.get_info(f'best_ckpt_{key}') == own
    assert 'best_ckpt' not in runner.message_hub.runtime_info


@pytest.mark.parametrize('main_process', [True, False])
def test_a_moved_work_dir_records_its_own_last_and_best_on_every_rank(
        tmp_path, monkeypatch, main_process):
    """Every rank of tools/train.py --test reads the hub's record of the checkpoint it tests;
    the old absolute paths named files of the work dir's former place."""
    runner, hook = runner_with_hook(tmp_path / 'written', save_best='mAR', rule='greater')
    runner.train_loop._iter = 4
    hook._save_checkpoint(runner)
    hook._save_best_checkpoint(runner, {'mAR': 1.0})
    written = {key: runner.message_hub.get_info(key) for key in ('last_ckpt', 'best_ckpt')}
    moved = (tmp_path / 'written').rename(tmp_path / 'moved')
    monkeypatch.setattr(checkpoint_hook, 'is_main_process', lambda: main_process)
    runner, hook = runner_with_hook(moved, save_best='mAR', rule='greater')
    for key, path in written.items():  # as the resumed hub says
        runner.message_hub.update_info(key, path)
    hook.before_train(runner)
    assert runner.message_hub.get_info('last_ckpt') == hook.last_ckpt == str(moved / 'iter_4.pth')
    assert runner.message_hub.get_info('best_ckpt') == str(moved / 'best_mAR_iter_4.pth')


def validate_rising_map(monkeypatch) -> None:
    """Validations report mAR 1, 2, 3, 4 at iterations 2, 4, 6, 8: each a new best."""
    scores = {2: 1.0, 4: 2.0, 6: 3.0, 8: 4.0}

    def validate(loop):
        metrics = {'mAR': scores[loop.runner.train_loop.iter]}
        loop.runner.call_hook('after_val_epoch', metrics=metrics)
        return metrics

    monkeypatch.setattr(ValLoop, 'run', validate)


def test_a_run_resumed_in_its_work_dir_writes_the_checkpoints_of_the_uninterrupted_run(
        tmp_path, monkeypatch):
    """A validation that finds a new best saves its iteration's checkpoint again where a last
    checkpoint is known: the resumed run knew none until its next periodic save, and wrote no
    iter_6.pth."""
    validate_rising_map(monkeypatch)

    def cfg(work_dir, **kwargs):
        cfg = with_validation(make_cfg(work_dir, phases=[PHASES[1]],
                                       checkpoint_interval=4, **kwargs))
        cfg.default_hooks.checkpoint.update(save_best='mAR', rule='greater')
        return cfg

    train(cfg(tmp_path / 'whole'))
    train(cfg(tmp_path / 'cut', stop_after=4))
    train(cfg(tmp_path / 'cut', resume_from=tmp_path / 'cut' / 'iter_4.pth'))
    written = {run: sorted(p.name for p in (tmp_path / run).glob('*.pth'))
               for run in ('whole', 'cut')}
    assert written['cut'] == written['whole'] == ['best_mAR_iter_8.pth', 'iter_4.pth',
                                                  'iter_6.pth', 'iter_8.pth']


class Killed(BaseException):
    """A SIGKILL, as far as the run is concerned: nothing after it runs."""


@pytest.mark.parametrize('killed_at', ['iter_2.pth', 'best_mAR_iter_2.pth'])
def test_a_run_killed_before_removing_what_its_save_replaced_has_them_removed_by_its_resume(
        tmp_path, monkeypatch, killed_at):
    """A kill after iteration 4's checkpoint was in place but before the file it replaced was
    removed (the periodic iter_2.pth of max_keep_ckpts=1, or the best of iteration 2) left that
    file for good: the resumed run's records no longer named it."""
    validate_rising_map(monkeypatch)

    def cfg(work_dir, **kwargs):
        cfg = with_validation(make_cfg(work_dir, phases=[PHASES[1]], checkpoint_interval=2,
                                       **kwargs))
        cfg.default_hooks.checkpoint.update(save_best='mAR', rule='greater', max_keep_ckpts=1)
        return cfg

    train(cfg(tmp_path / 'whole'))
    remove = CheckpointHook._remove

    def kill_at(hook, path):
        if Path(path).name == killed_at:
            raise Killed
        remove(hook, path)

    with monkeypatch.context() as patch:
        patch.setattr(CheckpointHook, '_remove', kill_at)
        with pytest.raises(Killed):
            train(cfg(tmp_path / 'cut'))
    cut = tmp_path / 'cut'
    assert (cut / killed_at).is_file()
    assert (cut / 'last_checkpoint').read_text() == str(cut / 'iter_4.pth')
    train(cfg(cut, resume_from=cut / 'iter_4.pth'))
    written = {run: sorted(p.name for p in (tmp_path / run).glob('*.pth'))
               for run in ('whole', 'cut')}
    assert written['cut'] == written['whole'] == ['best_mAR_iter_8.pth', 'iter_8.pth']


def test_a_best_saved_again_at_its_iteration_keeps_its_file(tmp_path):
    """A resumed run makes up the validation of the iteration it resumed at."""
    runner, hook = runner_with_hook(tmp_path, save_best='mAR', rule='greater')
    runner.train_loop._iter = 4
    hook._save_best_checkpoint(runner, {'mAR': 1.0})
    hook._save_best_checkpoint(runner, {'mAR': 2.0})
    assert loads(tmp_path / 'best_mAR_iter_4.pth')
    assert hook.best_ckpt_path == str(tmp_path / 'best_mAR_iter_4.pth')


def test_the_work_dir_reached_through_a_link_still_owns_its_best(tmp_path):
    real = tmp_path / 'real'
    real.mkdir()
    (tmp_path / 'link').symlink_to(real)
    runner, hook = runner_with_hook(tmp_path / 'link', save_best='mAR', rule='greater')
    hook._save_best_checkpoint(runner, {'mAR': 1.0})
    hook.best_ckpt_path = str(real / 'best_mAR_iter_0.pth')  # recorded by its real path
    runner.train_loop._iter = 4
    hook._save_best_checkpoint(runner, {'mAR': 2.0})
    assert sorted(p.name for p in real.glob('best_*.pth')) == ['best_mAR_iter_4.pth']


def test_a_run_resumed_from_another_work_dirs_best_is_told_it_stays_there(tmp_path,
                                                                         monkeypatch):
    runner, hook = runner_with_hook(tmp_path / 'fork', save_best='mAR', rule='greater')
    warned = []
    monkeypatch.setattr(runner.logger, 'warning', warned.append)
    # What MMEngine's before_train takes from the resumed checkpoint's message hub.
    runner.message_hub.update_info('best_ckpt', str(tmp_path / 'fork' / 'best_mAR_iter_4.pth'))
    hook.before_train(runner)
    assert warned == []  # its own
    runner.message_hub.update_info('best_ckpt', str(tmp_path / 'source' / 'best_mAR_iter_4.pth'))
    hook.before_train(runner)
    assert [w.split(',')[:2] for w in warned] == [
        ['the best checkpoint so far', f' {tmp_path}/source/best_mAR_iter_4.pth']]


def test_only_the_main_process_removes_checkpoints(tmp_path, monkeypatch):
    runner, hook = runner_with_hook(tmp_path)
    old = tmp_path / 'iter_4.pth'
    old.write_bytes(b'checkpoint')
    monkeypatch.setattr(checkpoint_hook, 'is_main_process', lambda: False)
    hook._remove(str(old))
    assert old.exists()
    monkeypatch.setattr(checkpoint_hook, 'is_main_process', lambda: True)
    hook._remove(str(old))
    assert not old.exists()


def test_a_save_best_the_validation_does_not_report_is_named_with_those_it_does(tmp_path):
    """MMEngine's bare KeyError 'MAR' came at the first validation, a phase in."""
    runner, hook = runner_with_hook(tmp_path, save_best='MAR', rule='greater')
    metrics = {'en/AR': 1.0, 'de/AR': 2.0, 'mAR': 2.0, 'rSum': 12.0}
    with pytest.raises(KeyError, match=(
            r"^default_hooks.checkpoint.save_best='MAR': the validation reported no such "
            r"metric \(did you mean 'mAR'\?\); it reported mAR, rSum, de/AR, en/AR: name one "
            r"of them$")):
        hook._save_best_checkpoint(runner, metrics)
    assert not list(tmp_path.glob('best_*.pth'))
    checkpoint_hook.check_best_keys(['auto'], metrics)  # MMEngine's: the first metric


def test_a_load_from_of_other_languages_is_refused_naming_the_file_and_the_languages(tmp_path):
    """The retriever's own check fails inside MMEngine's load, naming neither the file nor
    load_from."""
    runner, hook = runner_with_hook(tmp_path)
    runner._resume, runner._load_from = False, 'four_languages.pth'
    other = MODELS.build(tiny_retriever_cfg(language_branch=tiny_branch_cfg(('de', 'zh', 'ja'))))
    with pytest.raises(ValueError, match=(
            r"^load_from=four_languages.pth: checkpoint does not match the config: languages: "
            r"checkpoint \['de', 'zh', 'ja'\] vs config \['de', 'zh'\]")):
        hook.after_load_checkpoint(runner, dict(state_dict=other.state_dict()))
    # Another method's: the message said it took any checkpoint of the backbone, width and
    # languages, and refused this one all the same.
    runner._load_from = 'dasd.pth'
    dasd = MODELS.build(tiny_dasd_cfg())
    with pytest.raises(ValueError, match=(
            r"^load_from=dasd.pth: checkpoint does not match the config: disentangler: "
            r"checkpoint 'SemanticsDisentangler' vs config None; .*adapters: checkpoint "
            r"\['DynamicAdapter'\] vs config \['StaticAdapter'\]\. .*takes only a checkpoint "
            r"whose recorded facts \(the backbone, width, languages, adapter and disentangler "
            r"types and their settings\) are the config's")):
        hook.after_load_checkpoint(runner, dict(state_dict=dasd.state_dict()))


def test_a_load_from_logs_the_weights_it_leaves_as_built(tmp_path, monkeypatch):
    """MMEngine prints them to the terminal alone; the run's log keeps no trace otherwise."""
    runner, hook = runner_with_hook(tmp_path)
    runner._resume, runner._load_from = False, 'narrow.pth'
    warnings = []
    monkeypatch.setattr(runner.logger, 'warning', warnings.append)
    hook.after_load_checkpoint(runner, dict(state_dict=runner.model.state_dict()))
    assert warnings == []
    hook.after_load_checkpoint(runner, dict(state_dict=adapter_weights_of_other_shapes(runner)))
    assert len(warnings) == 1
    assert re.match(r'load_from=narrow.pth: loaded leniently, \d+ keys of other shapes: '
                    r'language_branch\.adapters\..*down\.weight \(checkpoint \[', warnings[0])


def test_a_load_from_of_a_language_module_file_is_told_to_be_merged(tmp_path):
    from xmr.models.language.language_modules import save_language_module

    runner, hook = runner_with_hook(tmp_path)
    runner._resume, runner._load_from = False, str(tmp_path / 'de.pth')
    save_language_module(runner.model, 'de', tmp_path / 'de.pth', base_checkpoint='run.pth')
    allow_mmengine_checkpoint_types()
    module = torch.load(tmp_path / 'de.pth', weights_only=True)
    with pytest.raises(ValueError, match=(
            r"^load_from=.*de\.pth is the language module of 'de' alone, not a model's "
            r'checkpoint: merge it into one first \(tools/language_modules\.py merge CONFIG '
            r'--base run\.pth --modules de=.*de\.pth --out merged\.pth\)$')):
        hook.after_load_checkpoint(runner, module)


def test_a_save_best_the_validation_will_not_report_is_refused_before_the_first_step(tmp_path):
    """Refused at the first validation before, a phase (hours) in: here before any step."""
    cfg = with_validation(make_cfg(tmp_path))
    cfg.default_hooks.checkpoint.update(save_best='mAP', rule='greater')
    runner = Runner.from_cfg(cfg)
    with pytest.raises(KeyError, match=r"default_hooks.checkpoint.save_best='mAP': the "
                                       r"validation will report no such metric \(did you mean "
                                       r"'mAR'\?\); it will report mAR, rSum, de/AR"):
        train_runner(runner)
    assert next(h for h in runner.hooks if isinstance(h, RecordingHook)).records == []


def with_facts(weights: dict, **changed) -> dict:
    """``weights`` with the facts changed (a value, or ``None`` to leave a fact out, as a
    checkpoint written before that fact existed does)."""
    facts = {**decode_facts(weights['_extra_state']), **changed}
    facts = {key: value for key, value in facts.items() if changed.get(key, 0) is not None}
    return dict(weights, _extra_state=torch.tensor(list(json.dumps(facts).encode()),
                                                   dtype=torch.uint8))


def loaded_by(runner, path: Path, how: str) -> str:
    """``'loaded'``, or the first line of the refusal, of ``path`` loaded as ``how`` does:
    ``resume`` and ``load_from`` through the runner's load (CheckpointHook, then MMEngine's
    loading into the model), ``xmr.apis`` through ``load_trained_checkpoint``."""
    from xmr.apis import load_trained_checkpoint

    try:
        if how == 'xmr.apis':
            load_trained_checkpoint(runner.model, path)
        else:
            runner._resume, runner._load_from = how == 'resume', str(path)
            runner.load_checkpoint(str(path))
    except ValueError as error:
        return str(error).splitlines()[0]
    return 'loaded'


@pytest.mark.parametrize('how', ['resume', 'load_from', 'xmr.apis'])
def test_every_path_reads_the_facts_as_facts_not_weights(tmp_path, how):
    """The facts (``_extra_state``) alone hold no weight; a checkpoint of fewer facts (written
    before one was added) agrees on those it has; one of other facts is refused naming the
    file and the fact. load_from took the facts alone as a partial checkpoint and trained
    from the built weights; a resume refused fewer facts as 'keys of other shapes:
    _extra_state' and named other facts' length, not the fact."""
    runner, _ = runner_with_hook(tmp_path)
    weights = runner.model.state_dict()
    files = {'facts alone': {'_extra_state': weights['_extra_state']},
             'fewer facts': with_facts(weights, disentangler=None, target_vocabulary=None),
             'other facts': with_facts(weights, languages=['de', 'zh', 'ja'])}
    for name, state in files.items():
        torch.save(resumable(state), tmp_path / f'{name}.pth')
    refusals = {name: loaded_by(runner, tmp_path / f'{name}.pth', how) for name in files}
    assert re.search(r"holds none of the model's weights|none of its 1 entries is a weight|"
                     r'its weights do not fit', refusals['facts alone'])
    assert refusals['fewer facts'] == 'loaded'
    assert re.search(r"other facts.pth: checkpoint does not match the config: languages: "
                     r"checkpoint \['de', 'zh', 'ja'\] vs config \['de', 'zh'\]",
                     refusals['other facts'])


def saved_iterations(work_dir: Path) -> list[int]:
    return sorted(int(path.stem[5:]) for path in work_dir.glob('iter_*.pth'))


def test_a_new_best_between_periodic_checkpoints_costs_no_periodic_one(tmp_path):
    """MMEngine saves the iteration of a new best again and counted it towards max_keep_ckpts:
    with checkpoints every 4 iterations kept 2 and bests at 6, 10 and 11, iter_8.pth was gone
    when iter_12.pth was written."""
    runner, hook = runner_with_hook(tmp_path, max_keep_ckpts=2, save_best='mAR', rule='greater')
    states = []
    for done, mAR in [(3, None), (6, 1.0), (7, None), (10, 2.0), (11, 3.0), (11, None)]:
        runner.train_loop._iter = done
        if mAR is None:
            hook._save_checkpoint(runner)  # the periodic one of iteration done + 1
        else:
            hook._save_best_checkpoint(runner, {'mAR': mAR})
        states.append(saved_iterations(tmp_path))
    assert states == [[4], [4, 6], [4, 8], [4, 8, 10], [4, 8, 11], [8, 12]]
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path / 'iter_12.pth')
    allow_mmengine_checkpoint_types()
    info = torch.load(tmp_path / 'iter_12.pth', map_location='cpu', weights_only=True)[
        'message_hub']['runtime_info']
    assert (info['keep_ckpt_ids'], info['interim_ckpt_step']) == ([8, 12], None)


def test_a_best_at_a_periodic_checkpoint_s_iteration_rewrites_that_checkpoint(tmp_path):
    runner, hook = runner_with_hook(tmp_path, max_keep_ckpts=1, save_best='mAR', rule='greater')
    runner.train_loop._iter = 3
    hook._save_checkpoint(runner)
    runner.train_loop._iter = 4
    hook._save_best_checkpoint(runner, {'mAR': 1.0})
    assert saved_iterations(tmp_path) == [4]
    assert list(hook.keep_ckpt_ids) == [4] and hook.interim_step is None
    allow_mmengine_checkpoint_types()
    info = torch.load(tmp_path / 'iter_4.pth', map_location='cpu', weights_only=True)[
        'message_hub']['runtime_info']
    assert info['best_score'] == 1.0


def test_a_run_resumed_from_an_interim_checkpoint_replaces_it_with_its_next(tmp_path):
    runner, hook = runner_with_hook(tmp_path, max_keep_ckpts=1)
    runner.train_loop._iter = 3
    hook._save_checkpoint(runner)
    runner.train_loop._iter = 5
    hook.save_interim_checkpoint(runner, 6)  # a signal's stop after iteration 6
    assert saved_iterations(tmp_path) == [4, 6]
    allow_mmengine_checkpoint_types()
    saved = torch.load(tmp_path / 'iter_6.pth', map_location='cpu', weights_only=True)
    resumed, hook = runner_with_hook(tmp_path, max_keep_ckpts=1)
    resumed.message_hub.load_state_dict(saved['message_hub'])
    resumed._resume = True
    hook.before_train(resumed)
    assert (list(hook.keep_ckpt_ids), hook.interim_step) == ([4], 6)
    resumed.train_loop._iter = 7
    hook._save_checkpoint(resumed)
    assert saved_iterations(tmp_path) == [8]


def test_a_run_without_param_schedulers_saves_none(tmp_path):
    """PhasedTrainLoop sets the rates itself: MMEngine would warn at every save that there is
    no scheduler to save."""
    runner, hook = runner_with_hook(tmp_path)
    assert runner.param_schedulers is None
    assert hook.save_param_scheduler is False


def test_a_load_from_takes_weights_saved_with_the_ddp_module_prefix(tmp_path, monkeypatch):
    """Every weight fits once DDP's prefix is stripped: nothing is logged as left as built, and
    the facts under the prefix are still compared."""
    runner, hook = runner_with_hook(tmp_path)
    runner._resume, runner._load_from = False, 'ddp.pth'
    warnings = []
    monkeypatch.setattr(runner.logger, 'warning', warnings.append)
    hook.after_load_checkpoint(runner, dict(state_dict={
        f'module.{key}': value for key, value in runner.model.state_dict().items()}))
    assert warnings == []
    other = MODELS.build(tiny_retriever_cfg(language_branch=tiny_branch_cfg(('de', 'zh', 'ja'))))
    with pytest.raises(ValueError, match=r'^load_from=ddp.pth: checkpoint does not match the '
                                         r'config: languages'):
        hook.after_load_checkpoint(runner, dict(state_dict={
            f'module.{key}': value for key, value in other.state_dict().items()}))


def test_a_load_from_whose_state_dict_is_no_mapping_is_left_to_mmengine(tmp_path):
    """MMEngine's own error names what it holds; the hook's checks must not fail first."""
    runner, hook = runner_with_hook(tmp_path)
    runner._resume, runner._load_from = False, 'list.pth'
    hook.after_load_checkpoint(runner, dict(state_dict=[torch.zeros(1)]))


def test_pending_gradients_are_gathered_only_for_a_checkpoint_that_saves_the_optimiser(
        tmp_path):
    """The gathered gradients go into the optimiser's state: without it there is nothing to
    gather them for."""
    for save_optimizer, expected in ((False, 0), (True, 1)):
        runner, hook = runner_with_hook(tmp_path / str(save_optimizer),
                                        save_optimizer=save_optimizer)
        gathered = []
        runner.optim_wrapper.gather_pending_grads = lambda gathered=gathered: gathered.append(1)
        runner.train_loop._iter = 3
        hook._save_checkpoint(runner)
        assert len(gathered) == expected


def test_a_step_saved_twice_is_kept_once_whatever_the_number_kept(tmp_path):
    """Counted twice, it would take the place of another periodic checkpoint."""
    runner, hook = runner_with_hook(tmp_path, max_keep_ckpts=3)
    runner.train_loop._iter = 3
    hook._save_checkpoint(runner)
    hook._save_checkpoint(runner)
    assert list(hook.keep_ckpt_ids) == [4]
    assert runner.message_hub.get_info('keep_ckpt_ids') == [4]


def test_a_periodic_checkpoint_ends_the_interim_one_in_place(tmp_path):
    runner, hook = runner_with_hook(tmp_path, max_keep_ckpts=2)
    runner.train_loop._iter = 5
    hook.save_interim_checkpoint(runner, 6)
    assert hook.interim_step == 6
    runner.train_loop._iter = 7
    hook._save_checkpoint(runner)
    assert saved_iterations(tmp_path) == [8]
    assert hook.interim_step is None
    assert runner.message_hub.get_info(checkpoint_hook.INTERIM_KEY) is None


def test_an_interim_checkpoint_records_the_iterations_done_for_the_resume(tmp_path):
    """In after_train_iter the loop has not counted the iteration yet (runner.iter 6, 7 done):
    MMEngine's resume sets the loop's iteration from meta, which must say 7."""
    runner, hook = runner_with_hook(tmp_path, max_keep_ckpts=2)
    runner.train_loop._iter = 6
    hook.save_interim_checkpoint(runner, 7)
    allow_mmengine_checkpoint_types()
    saved = torch.load(tmp_path / 'iter_7.pth', map_location='cpu', weights_only=True)
    assert saved['meta']['iter'] == 7


def test_a_best_that_fails_to_write_leaves_the_next_periodic_checkpoint_periodic(
        tmp_path, monkeypatch):
    """The best is saved as an interim checkpoint: its failure must not leave the hook saving
    the periodic ones as interim (kept until the next, counted towards no max_keep_ckpts)."""
    runner, hook = runner_with_hook(tmp_path, max_keep_ckpts=2, save_best='mAR', rule='greater')
    runner.train_loop._iter = 5
    with monkeypatch.context() as patch:
        fail_fsync_with_enospc(patch)
        with pytest.raises(OSError, match='writing failed'):
            hook._save_best_checkpoint(runner, {'mAR': 1.0})
    runner.train_loop._iter = 7
    hook._save_checkpoint(runner)
    assert list(hook.keep_ckpt_ids) == [8] and hook.interim_step is None


def test_the_earlier_run_s_best_stays_while_this_run_s_fails_to_write(tmp_path, monkeypatch):
    torch.save({'state_dict': {}}, tmp_path / 'best_mAR_iter_300.pth')
    runner, hook = runner_with_hook(tmp_path, save_best='mAR', rule='greater',
                                    earlier_best=['best_mAR_iter_300.pth'])
    runner.train_loop._iter = 100
    with monkeypatch.context() as patch:
        fail_fsync_with_enospc(patch)
        with pytest.raises(OSError, match='writing failed'):
            hook._save_best_checkpoint(runner, {'mAR': 1.0})
    assert sorted(path.name for path in tmp_path.glob('best_*.pth')) == ['best_mAR_iter_300.pth']
    hook._save_best_checkpoint(runner, {'mAR': 2.0})
    assert sorted(path.name for path in tmp_path.glob('best_*.pth')) == ['best_mAR_iter_100.pth']


def test_a_new_best_replaces_the_earlier_best_of_its_own_key_alone_once(tmp_path, monkeypatch):
    """R1's file name begins as R10's does but for the separator: R10's earlier best stays.
    The earlier best is replaced, and said so, once."""
    for name in ('best_R1_iter_300.pth', 'best_R10_iter_300.pth'):
        torch.save({'state_dict': {}}, tmp_path / name)
    runner, hook = runner_with_hook(
        tmp_path, save_best=['R1', 'R10'], rule=['greater'] * 2,
        earlier_best=['best_R1_iter_300.pth', 'best_R10_iter_300.pth'])
    said = []
    monkeypatch.setattr(runner.logger, 'info', said.append)
    for done, score in ((100, 1.0), (200, 2.0)):
        runner.train_loop._iter = done
        hook._save_best_checkpoint(runner, {'R1': score, 'R10': float('nan')})
    assert sorted(path.name for path in tmp_path.glob('best_*.pth')) == [
        'best_R10_iter_300.pth', 'best_R1_iter_200.pth']
    assert len([line for line in said if 'best_R1_iter_300.pth, the best' in line]) == 1


@pytest.mark.parametrize('filename_tmpl', [None, 'step{:06d}.pth'])
def test_a_new_best_leaves_the_earlier_best_of_a_key_its_own_key_begins(
        tmp_path, filename_tmpl):
    """``t2v/R@1``'s file name is a prefix of ``t2v/R@1_sum``'s (``best_t2v_R@1_`` both): the
    new best of R@1 replaces R@1's earlier best alone, whatever the checkpoints' file names."""
    def named(key, step):
        return f'best_{key}_' + (filename_tmpl or 'iter_{}.pth').format(step)

    earlier = [named('t2v_R@1', 300), named('t2v_R@1_sum', 300)]
    for name in earlier:
        torch.save({'state_dict': {}}, tmp_path / name)
    runner, hook = runner_with_hook(tmp_path, save_best=['t2v/R@1', 't2v/R@1_sum'],
                                    rule=['greater'] * 2, earlier_best=earlier,
                                    filename_tmpl=filename_tmpl)
    runner.train_loop._iter = 100
    hook._save_best_checkpoint(runner, {'t2v/R@1': 1.0, 't2v/R@1_sum': float('nan')})
    assert sorted(path.name for path in tmp_path.glob('best_*.pth')) == sorted(
        [named('t2v_R@1', 100), named('t2v_R@1_sum', 300)])


def test_a_validation_of_eight_metrics_is_listed_whole():
    """More than eight are cut to eight and counted; eight are all shown."""
    metrics = [f'm{index}' for index in range(8)]
    with pytest.raises(KeyError) as refused:
        checkpoint_hook.check_metric_names([('save_best', 'x')], metrics)
    assert str(refused.value).endswith(f"it reported {', '.join(metrics)}: name one of them")
    with pytest.raises(KeyError, match=r'm7, \.\.\. \(9 in all\): name one'):
        checkpoint_hook.check_metric_names([('save_best', 'x')], [*metrics, 'm8'])


def test_a_model_without_facts_takes_a_checkpoint_with_them():
    """Only a retriever records facts to compare; any other model leaves them to the
    weights' check."""
    from xmr.engine.checkpoint import FACTS

    checkpoint_hook.refuse_other_facts(torch.nn.Linear(2, 2), {FACTS: torch.zeros(3)},
                                       'load_from=x.pth', 'fix')
