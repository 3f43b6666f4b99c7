"""One training run per work dir: a second refuses naming the holder, a stale lock is taken over."""
from __future__ import annotations

import builtins
import importlib.util
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from mmengine.hooks import Hook

import xmr.engine.work_dir as work_dir_module
from tests.conftest import REPO
from tests.engine.test_loops import PHASES, make_cfg, train
from xmr.engine.work_dir import (
    LOCK_NAME,
    WorkDirLockedError,
    lock_work_dir,
    process_start_time,
    unlock_work_dir,
    work_dir_locked_here,
)
from xmr.registry import HOOKS


@pytest.fixture
def other_process():
    process = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
    yield process.pid
    process.kill()
    process.wait()


def train_tool():
    """``tools/train.py`` as a module, its ``main`` callable with an argument list."""
    spec = importlib.util.spec_from_file_location('train_tool', REPO / 'tools' / 'train.py')
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, '-c', 'pass'])
    process.wait()
    return process.pid


def test_a_second_run_refuses_naming_the_holders_pid_and_writes_nothing(tmp_path, other_process):
    lock = tmp_path / LOCK_NAME
    lock.write_text(f'{other_process} {socket.gethostname()}\n')
    cfg = make_cfg(tmp_path, phases=PHASES[:1], checkpoint_interval=1)
    cfg.custom_hooks.insert(0, dict(type='WorkDirLockHook'))
    with pytest.raises(WorkDirLockedError, match=f'another training run \\(PID {other_process}\\)'
                       f' is using this work dir \\(lock file {lock}\\)'):
        train(cfg)
    assert not list(tmp_path.glob('*.pth'))
    assert lock.read_text().split()[0] == str(other_process)


def test_the_train_tool_refuses_before_the_runner_writes_its_config_and_log(tmp_path,
                                                                           other_process):
    tool = train_tool()
    (tmp_path / LOCK_NAME).write_text(f'{other_process} {socket.gethostname()}\n')
    with pytest.raises(WorkDirLockedError, match=f'PID {other_process}'):
        tool.main([str(REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'),
                   '--work-dir', str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_NAME]  # no dump, no log folder


def test_the_checkpoints_of_a_running_run_are_not_called_an_earlier_runs(tmp_path,
                                                                        other_process):
    """A second run into a work dir where a run is training was told its checkpoints were an
    earlier run's, to resume or remove."""
    (tmp_path / LOCK_NAME).write_text(f'{other_process} {socket.gethostname()}\n')
    (tmp_path / 'iter_3.pth').write_bytes(b'weights')
    for resume in ([], ['--resume', 'auto']):
        with pytest.raises(WorkDirLockedError, match=f'another training run \\(PID '
                                                     f'{other_process}\\) is using this work dir'):
            train_tool().main([str(REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'),
                               '--work-dir', str(tmp_path), *resume])


@pytest.mark.parametrize('launcher, variable', [('slurm', 'SLURM_PROCID'),
                                                ('mpi', 'OMPI_COMM_WORLD_RANK'),
                                                ('pytorch', 'RANK')])
def test_only_the_first_task_of_a_launcher_takes_the_lock_before_the_runner(
        tmp_path, other_process, monkeypatch, launcher, variable):
    """srun and mpirun set no RANK before MMEngine starts the group: each task reads its rank
    from its launcher's variable, so the second task neither takes nor trips on the lock."""
    import mmengine.runner

    import xmr.engine.process

    tool = train_tool()
    (tmp_path / LOCK_NAME).write_text(f'{other_process} {socket.gethostname()}\n')
    for name in ('RANK', 'SLURM_PROCID', 'OMPI_COMM_WORLD_RANK'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(xmr.engine.process, 'setup_cpu_distributed', lambda *args: None)

    def reached(cfg):
        raise RuntimeError('the runner is built')

    monkeypatch.setattr(mmengine.runner.Runner, 'from_cfg', reached)
    argv = [str(REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'), '--work-dir',
            str(tmp_path), '--launcher', launcher]
    monkeypatch.setenv(variable, '1')
    with pytest.raises(RuntimeError, match='the runner is built'):
        tool.main(argv)
    monkeypatch.setenv(variable, '0')
    with pytest.raises(WorkDirLockedError, match=f'PID {other_process}'):
        tool.main(argv)


def test_a_lock_of_a_dead_run_is_taken_over_and_released_at_the_end(tmp_path):
    pid = dead_pid()
    lock = tmp_path / LOCK_NAME
    lock.write_text(f'{pid} {socket.gethostname()}\n')
    cfg = make_cfg(tmp_path, phases=PHASES[:1], checkpoint_interval=2)
    cfg.custom_hooks.insert(0, dict(type='WorkDirLockHook'))
    cfg.log_level = 'INFO'
    torch.manual_seed(0)
    train(cfg)
    log = next(tmp_path.glob('*/*.log')).read_text()
    assert f'took over the lock of PID {pid}, which is no longer running' in log
    assert (tmp_path / 'iter_4.pth').is_file()
    assert not lock.exists()


def test_a_lock_taken_before_training_is_left_to_its_taker(tmp_path):
    """tools/train.py takes the lock before the runner and keeps it through --test, whose
    results go into the work dir: the hook must not give it back as training ends."""
    from types import SimpleNamespace

    from xmr.engine.hooks.work_dir_lock import WorkDirLockHook

    runner = SimpleNamespace(work_dir=str(tmp_path), logger=None)
    lock_work_dir(tmp_path)
    hook = WorkDirLockHook()
    hook.before_train(runner)
    hook.after_run(runner)
    assert work_dir_locked_here(tmp_path)
    unlock_work_dir(tmp_path)
    hook.before_train(runner)  # the hook's own lock it gives back
    assert work_dir_locked_here(tmp_path)
    hook.after_run(runner)
    assert not (tmp_path / LOCK_NAME).exists()


def test_the_lock_names_this_process_and_host_and_refuses_a_holder_on_another_host(tmp_path):
    assert lock_work_dir(tmp_path) is None
    assert (tmp_path / LOCK_NAME).read_text() == (
        f'{os.getpid()} {socket.gethostname()} {process_start_time(os.getpid())}\n')
    assert lock_work_dir(tmp_path) is None  # ours already: tools/train.py, then the hook
    unlock_work_dir(tmp_path)
    assert not (tmp_path / LOCK_NAME).exists()

    (tmp_path / LOCK_NAME).write_text('4242 gpu-node-7\n')
    with pytest.raises(WorkDirLockedError, match=r'PID 4242 on gpu-node-7.*if it is gone, delete'):
        lock_work_dir(tmp_path)
    unlock_work_dir(tmp_path)  # not ours: kept
    assert (tmp_path / LOCK_NAME).exists()
    (tmp_path / LOCK_NAME).write_text(f'{os.getpid()} gpu-node-7\n')  # our PID, another host
    with pytest.raises(WorkDirLockedError, match=f'PID {os.getpid()} on gpu-node-7'):
        lock_work_dir(tmp_path)


def test_a_lock_of_this_pid_and_host_but_another_start_is_no_lock_of_this_process(tmp_path):
    """A failing process of another node (or an earlier process of a restarted container)
    with the holder's PID released a live run's lock; a stale lock of an earlier process of
    this PID was kept as this run's, for a second run to take over."""
    host, now = socket.gethostname(), process_start_time(os.getpid())
    (tmp_path / LOCK_NAME).write_text(f'{os.getpid()} gpu-node-7 {now}\n')
    unlock_work_dir(tmp_path)  # another node's process of our PID: kept
    assert (tmp_path / LOCK_NAME).exists()
    earlier = f'{os.getpid()} {host} {int(now) - 1}\n'
    (tmp_path / LOCK_NAME).write_text(earlier)
    unlock_work_dir(tmp_path)  # an earlier process of our PID: not ours to release
    assert (tmp_path / LOCK_NAME).read_text() == earlier
    assert lock_work_dir(tmp_path) == (
        f'{tmp_path}: took over the lock of PID {os.getpid()}, which is no longer running (its '
        'PID now names another process than the one that wrote the lock)')
    assert (tmp_path / LOCK_NAME).read_text() == f'{os.getpid()} {host} {now}\n'
    unlock_work_dir(tmp_path)
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_taken_over_lock_is_reported(tmp_path, monkeypatch):
    pid = dead_pid()
    (tmp_path / LOCK_NAME).write_text(f'{pid} {socket.gethostname()}\n')
    assert lock_work_dir(tmp_path) == (f'{tmp_path}: took over the lock of PID {pid}, which is no '
                                       'longer running (an interrupted run)')
    (tmp_path / LOCK_NAME).write_text('')  # a holder killed before it wrote its PID
    monkeypatch.setattr(work_dir_module, 'EMPTY_LOCK_GRACE_S', 0.5)
    started = time.monotonic()
    assert 'took over' in lock_work_dir(tmp_path)
    assert time.monotonic() - started >= work_dir_module.EMPTY_LOCK_GRACE_S


def _create_empty_then_write(path, created) -> None:
    """A run on a file system without hard links: its lock exists, empty, before its line."""
    descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    created.set()
    time.sleep(0.5)
    os.write(descriptor, f'{os.getpid()} {socket.gethostname()}\n'.encode())
    os.close(descriptor)
    time.sleep(5)  # alive, holding the lock


def test_a_lock_created_in_place_and_not_yet_written_is_not_taken_for_stale(tmp_path,
                                                                          monkeypatch):
    """Read between its exclusive create and its write, a live run's lock was empty, taken for
    a killed run's, removed, and both runs went on holding the work dir."""
    monkeypatch.setattr(work_dir_module, 'EMPTY_LOCK_GRACE_S', 2.0)
    context = multiprocessing.get_context('fork')
    created = context.Event()
    writer = context.Process(target=_create_empty_then_write,
                             args=(tmp_path / LOCK_NAME, created))
    writer.start()
    try:
        assert created.wait(30)
        with pytest.raises(WorkDirLockedError, match=f'PID {writer.pid}'):
            lock_work_dir(tmp_path)
    finally:
        writer.kill()
        writer.join()


def test_a_file_system_without_hard_links_or_flock_still_locks_and_takes_over(tmp_path,
                                                                            monkeypatch):
    """FUSE object stores refuse hard links, Lustre without the option refuses flock."""
    import fcntl

    def refused(*args, **kwargs):
        raise OSError(38, 'Function not implemented')

    monkeypatch.setattr(os, 'link', refused)
    monkeypatch.setattr(fcntl, 'flock', refused)
    assert lock_work_dir(tmp_path / 'fresh') is None
    assert (tmp_path / 'fresh' / LOCK_NAME).read_text().split()[:2] == [
        str(os.getpid()), socket.gethostname()]
    pid = dead_pid()
    (tmp_path / LOCK_NAME).write_text(f'{pid} {socket.gethostname()}\n')
    assert f'took over the lock of PID {pid}' in lock_work_dir(tmp_path)
    assert (tmp_path / LOCK_NAME).read_text().split()[0] == str(os.getpid())
    assert not list(tmp_path.glob('.*.tmp'))


def test_a_lock_whose_pid_now_names_another_process_is_taken_over(tmp_path, other_process):
    """A restarted container hands the PID of the run that wrote the lock to another process."""
    started = process_start_time(other_process)
    assert started is not None and started.isdigit()
    host = socket.gethostname()
    (tmp_path / LOCK_NAME).write_text(f'{other_process} {host} {int(started) - 1}\n')
    assert lock_work_dir(tmp_path) == (
        f'{tmp_path}: took over the lock of PID {other_process}, which is no longer running '
        '(its PID now names another process than the one that wrote the lock)')
    unlock_work_dir(tmp_path)
    (tmp_path / LOCK_NAME).write_text(f'{other_process} {host} {started}\n')  # the writer
    with pytest.raises(WorkDirLockedError, match=f'PID {other_process}'):
        lock_work_dir(tmp_path)
    (tmp_path / LOCK_NAME).write_text(f'{other_process} {host}\n')  # a lock without the time
    with pytest.raises(WorkDirLockedError, match=f'PID {other_process}'):
        lock_work_dir(tmp_path)


def test_a_live_holder_whose_start_time_cannot_be_read_keeps_its_lock(tmp_path, other_process,
                                                                      monkeypatch):
    """Where ``/proc/<pid>/stat`` is unreadable (``hidepid``), a live PID is taken at its word:
    a lock is never taken over from a run that may still be writing."""
    import xmr.engine.work_dir as work_dir_module

    monkeypatch.setattr(work_dir_module, 'process_start_time', lambda pid: None)
    (tmp_path / LOCK_NAME).write_text(f'{other_process} {socket.gethostname()} 12345\n')
    with pytest.raises(WorkDirLockedError, match=f'PID {other_process}'):
        lock_work_dir(tmp_path)


@HOOKS.register_module(force=True)
class FailingHook(Hook):
    """Raises ``error`` (a builtin exception's name) in the second iteration, as a bad batch or
    a full disk would, or Ctrl-C in a notebook (``KeyboardInterrupt``)."""

    def __init__(self, error: str = 'RuntimeError') -> None:
        self.error = getattr(builtins, error)

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        if runner.iter + 1 == 2:
            raise self.error('disk full')


@pytest.mark.parametrize('error', [RuntimeError, KeyboardInterrupt])
def test_a_run_that_raises_releases_the_lock_and_the_sigterm_handler(tmp_path, error):
    """A notebook's failed or interrupted run must not keep the work dir locked (another
    process would be refused until the kernel exits) nor keep swallowing SIGTERM."""
    handler_before = signal.getsignal(signal.SIGTERM)
    cfg = make_cfg(tmp_path, phases=PHASES[:1])
    cfg.custom_hooks[:0] = [dict(type='WorkDirLockHook'), dict(type='PreemptionHook'),
                            dict(type='FailingHook', error=error.__name__)]
    with pytest.raises(error, match='disk full'):
        train(cfg)
    assert not (tmp_path / LOCK_NAME).exists()
    assert signal.getsignal(signal.SIGTERM) is handler_before


@HOOKS.register_module(force=True)
class FailingCleanUpHook(Hook):
    """An own hook called before the lock's (``HIGHEST``, listed first) whose failure handler
    raises, as one closing a tracking server that is down would."""

    priority = 'HIGHEST'

    def after_failed_train(self, runner) -> None:
        raise ConnectionError('tracking server unreachable')


def test_a_failure_handler_that_raises_leaves_neither_the_lock_nor_sigterm_nor_hides_the_error(
        tmp_path):
    """MMEngine-style calling stopped at the first handler that raised: the lock stayed held
    and SIGTERM swallowed, and the run raised the handler's ConnectionError, not 'disk full'."""
    handler_before = signal.getsignal(signal.SIGTERM)
    cfg = make_cfg(tmp_path, phases=PHASES[:1])
    cfg.custom_hooks[:0] = [dict(type='FailingCleanUpHook'), dict(type='WorkDirLockHook'),
                            dict(type='PreemptionHook'), dict(type='FailingHook')]
    with pytest.raises(RuntimeError, match='disk full') as raised:
        train(cfg)
    assert not (tmp_path / LOCK_NAME).exists()
    assert signal.getsignal(signal.SIGTERM) is handler_before
    assert raised.value.__notes__ == [
        'while handling it, FailingCleanUpHook.after_failed_train raised ConnectionError: '
        'tracking server unreachable (logged with its traceback)']


def test_a_train_tool_run_that_fails_before_training_gives_the_lock_back(tmp_path,
                                                                        monkeypatch):
    """tools/train.py takes the lock before it builds the runner; what fails before the hooks
    hold it (the runner's build, a checkpoint whose weights do not fit) must not leave it held
    by the process, a notebook's say, refusing every other run."""
    import mmengine.runner

    tool = train_tool()

    def fails(cfg):
        raise RuntimeError('the runner cannot be built')

    monkeypatch.setattr(mmengine.runner.Runner, 'from_cfg', fails)
    with pytest.raises(RuntimeError, match='cannot be built'):
        tool.main([str(REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'),
                   '--work-dir', str(tmp_path)])
    assert not (tmp_path / LOCK_NAME).exists()


def _attempt(work_dir, results) -> None:
    try:
        lock_work_dir(work_dir)
        results.put((os.getpid(), 'locked'))
    except WorkDirLockedError:
        results.put((os.getpid(), 'refused'))


def _late_run(work_dir, stale_read, taken, results) -> None:
    """A run that stops after reading the stale holder until the other run has taken over."""
    import xmr.engine.work_dir as work_dir_module

    read = work_dir_module._lock_holder

    def paused(path):
        holder = read(path)
        stale_read.set()
        taken.wait(30)
        return holder

    work_dir_module._lock_holder = paused
    _attempt(work_dir, results)


def _first_run(work_dir, stale_read, taken, results) -> None:
    stale_read.wait(30)
    _attempt(work_dir, results)
    taken.set()
    time.sleep(3)  # alive, holding the lock, while the late run decides


def test_of_two_runs_taking_over_a_stale_lock_at_once_one_gets_it(tmp_path):
    """The interleaving in which both took it: the late run read the stale holder before the
    first took over, and goes on once the first holds its own lock."""
    context = multiprocessing.get_context('fork')
    (tmp_path / LOCK_NAME).write_text(f'{dead_pid()} {socket.gethostname()}\n')
    stale_read, taken, results = context.Event(), context.Event(), context.Queue()
    runs = [context.Process(target=target, args=(tmp_path, stale_read, taken, results))
            for target in (_late_run, _first_run)]
    for run in runs:
        run.start()
    outcome = dict(results.get(timeout=60) for _ in runs)
    for run in runs:
        run.join()
    late, first = (run.pid for run in runs)
    assert outcome == {first: 'locked', late: 'refused'}
    assert (tmp_path / LOCK_NAME).read_text().split()[0] == str(first)


def _run_pausing_in_takeover(work_dir, paused_at, paused, other_started, taken, results,
                             done) -> None:
    """A run taking over the stale lock that pauses once inside the takeover: at 'open' (the
    stale file opened, not yet locked with flock) until the other run has taken the lock over,
    or at 'check' (under flock, the holder checked, the file not yet removed) until the other
    run is waiting for that flock."""
    import xmr.engine.work_dir as work_dir_module

    def pause() -> None:
        paused.set()
        if paused_at == 'open':
            taken.wait(30)
        else:
            other_started.wait(30)
            time.sleep(1)  # the other run reaches the flock this run holds

    if paused_at == 'open':
        real_fcntl = work_dir_module.fcntl

        class PausingFcntl:
            LOCK_EX = real_fcntl.LOCK_EX

            @staticmethod
            def flock(handle, operation):
                if not paused.is_set():
                    pause()
                return real_fcntl.flock(handle, operation)

        work_dir_module.fcntl = PausingFcntl
    else:
        parse, calls = work_dir_module._parse_holder, []

        def pausing_parse(text):
            calls.append(text)
            if len(calls) == 2:  # the check under flock (the first: reading the holder)
                pause()
            return parse(text)

        work_dir_module._parse_holder = pausing_parse
    _attempt(work_dir, results)
    done.wait(30)  # alive, holding the lock if it got it, while the other run decides


def _other_run(work_dir, paused, other_started, taken, results, done) -> None:
    paused.wait(30)
    other_started.set()
    _attempt(work_dir, results)
    taken.set()
    done.wait(30)


@pytest.mark.parametrize('paused_at', ['open', 'check'])
def test_a_stale_lock_another_run_takes_over_meanwhile_is_left_to_it(tmp_path, paused_at):
    """Two runs take over the same stale lock. 'open': one opened the stale file, then the
    other replaced it with its own lock; the opened file still names the stale holder, but is
    the lock no longer. 'check': one checked the file under flock; the other, waiting for the
    flock, must not remove the lock the first then creates. Either way one run locks."""
    context = multiprocessing.get_context('fork')
    (tmp_path / LOCK_NAME).write_text(f'{dead_pid()} {socket.gethostname()}\n')
    paused, other_started, taken, done = (context.Event() for _ in range(4))
    results = context.Queue()
    runs = [context.Process(target=_run_pausing_in_takeover,
                            args=(tmp_path, paused_at, paused, other_started, taken, results,
                                  done)),
            context.Process(target=_other_run,
                            args=(tmp_path, paused, other_started, taken, results, done))]
    for run in runs:
        run.start()
    outcome = dict(results.get(timeout=60) for _ in runs)
    holder = (tmp_path / LOCK_NAME).read_text().split()[0]
    done.set()
    for run in runs:
        run.join()
    assert sorted(outcome.values()) == ['locked', 'refused']
    assert holder == str(next(pid for pid, result in outcome.items() if result == 'locked'))


def test_the_lock_is_held_until_every_hook_has_ended_training(tmp_path):
    """Running first at after_train too, the lock was given back before the phase report and
    the last checkpoint were written into the work dir."""
    held = []

    @HOOKS.register_module(name='LateWriterTestHook', force=True)
    class LateWriter(Hook):
        priority = 'LOWEST'

        def after_train(self, runner):
            held.append(work_dir_locked_here(runner.work_dir))

    cfg = make_cfg(tmp_path, phases=PHASES[:1])
    cfg.custom_hooks += [dict(type='LateWriterTestHook'), dict(type='WorkDirLockHook')]
    train(cfg)
    assert held == [True]
    assert not (tmp_path / LOCK_NAME).exists()


def test_the_train_tool_holds_the_lock_through_its_test(tmp_path, monkeypatch):
    """--test writes its result into the work dir after training: the lock stays the run's
    until it is written, and is given back then."""
    from types import SimpleNamespace

    from xmr.engine.runner import ResumeCheckedRunner

    tool = train_tool()
    held = []
    trained = SimpleNamespace(train=lambda: held.append(work_dir_locked_here(tmp_path)),
                              hooks=[])
    monkeypatch.setattr(ResumeCheckedRunner, 'from_cfg', lambda cfg: trained)
    monkeypatch.setattr(tool, 'tested_checkpoint', lambda runner, which: 'iter_2.pth')
    monkeypatch.setattr(tool, 'test_after_training', lambda args, checkpoint: held.append(
        work_dir_locked_here(tmp_path)))
    tool.main([str(REPO / 'configs' / 'demo' / 'static_tiny-clip_synthetic.py'), '--work-dir',
               str(tmp_path), '--test'])
    assert held == [True, True]
    assert not (tmp_path / LOCK_NAME).exists()


def test_the_lock_refuses_before_any_other_hook_starts_training(tmp_path, other_process):
    """Listed last, the lock still runs first: no hook of the refused run (even a VERY_HIGH one)
    gets to its before_train, where clean-ups and caches would touch the running run's files."""
    started = []

    @HOOKS.register_module(name='EarlyTestHook', force=True)
    class Early(Hook):
        priority = 'VERY_HIGH'

        def before_train(self, runner):
            started.append(runner.iter)

    (tmp_path / LOCK_NAME).write_text(f'{other_process} {socket.gethostname()}\n')
    cfg = make_cfg(tmp_path, phases=PHASES[:1])
    cfg.custom_hooks += [dict(type='EarlyTestHook'), dict(type='WorkDirLockHook')]
    with pytest.raises(WorkDirLockedError):
        train(cfg)
    assert started == []
