"""kill -9 of tools/train.py during a checkpoint write and in the middle of a phase: no truncated
file under a final name, the work dir's lock is taken over, and the resumed run ends with the
uninterrupted run's weights and phase report. SIGTERM (a scheduler's preemption) in the middle
of a phase: the iteration under way ends with its checkpoint, and the resumed run is the same.

The run is a subprocess started through a small driver that makes it stop at the chosen moment
(half of ``iter_8.pth`` written, or the start of iteration 10) and say so in a marker file;
the test then kills it with SIGKILL, as a crash or an out-of-memory killer would, or sends
SIGTERM, for which the driver waits at that moment. The resumed run, like the uninterrupted one,
trains in the test's process.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mmengine.config import Config

import xmr.fileio
from tests.conftest import REPO, assert_same_checkpoint
from tests.engine.hooks.test_phase_report_hook import read_report, report_cfg
from xmr.engine.loops import PhasedTrainLoop
from xmr.engine.work_dir import LOCK_NAME

sys.path.insert(0, str(REPO / 'tools'))
import train as train_tool  # noqa: E402

pytestmark = pytest.mark.slow

DRIVER = '''
import os, runpy, signal, sys, time
from contextlib import contextmanager

import xmr.fileio
from xmr.engine.loops import PhasedTrainLoop

marker, moment = sys.argv.pop(1), sys.argv.pop(1)


def stop_here():
    open(marker, 'w').close()
    time.sleep(600)


class HalfWriter:
    def __init__(self, handle):
        self.handle = handle

    def write(self, data):
        self.handle.write(data[:len(data) // 2])
        self.handle.flush()
        stop_here()


real_open = xmr.fileio.atomic_open


@contextmanager
def pausing_open(path, mode='wb', **kwargs):
    with real_open(path, mode, **kwargs) as handle:
        yield HalfWriter(handle) if os.path.basename(str(path)) == moment else handle


real_run_iter = PhasedTrainLoop.run_iter


def pausing_run_iter(self, data_batch):
    if moment == f'iteration {self.iter}':
        stop_here()
    if moment == f'SIGTERM at iteration {self.iter}':
        open(marker, 'w').close()
        preemption = signal.getsignal(signal.SIGTERM).__self__  # PreemptionHook's handler
        while preemption.received is None:
            time.sleep(0.05)
    real_run_iter(self, data_batch)


xmr.fileio.atomic_open = pausing_open
PhasedTrainLoop.run_iter = pausing_run_iter
sys.argv[0] = os.path.join(sys.argv[1], 'tools', 'train.py')
del sys.argv[1]
runpy.run_path(sys.argv[0], run_name='__main__')
'''


@pytest.fixture(scope='module')
def tiny_config(tmp_path_factory) -> Path:
    """16 iterations over three phases, checkpoints every 4 (only the latest kept), phase-end
    validations and the phase report."""
    folder = tmp_path_factory.mktemp('config')
    cfg = report_cfg(folder / 'unused', checkpoint_interval=4)
    cfg.default_hooks.checkpoint.max_keep_ckpts = 1
    cfg.custom_hooks = [dict(type='WorkDirLockHook'), dict(type='RNGStateHook'),
                        dict(type='WeightsOnlyCheckpointHook'), dict(type='PhaseReportHook'),
                        dict(type='PreemptionHook')]
    path = folder / 'tiny.py'
    cfg.dump(str(path))
    return path


@pytest.fixture(scope='module')
def uninterrupted(tiny_config, tmp_path_factory) -> Path:
    return train(tiny_config, tmp_path_factory.mktemp('uninterrupted'))


@pytest.fixture(scope='module')
def best_config(tiny_config, tmp_path_factory) -> Path:
    """The tiny run with a validation every 6 iterations, cross_modal starting from
    cross_lingual's best (kept in ``phase_best/``)."""
    cfg = Config.fromfile(tiny_config)
    cfg.train_cfg.val_interval = 6
    cfg.train_cfg.phases[2]['start_from_best'] = 'mAR'
    path = tmp_path_factory.mktemp('best_config') / 'best.py'
    cfg.dump(str(path))
    return path


def train(config: Path, work_dir: Path, *options: str) -> Path:
    train_tool.main([str(config), '--work-dir', str(work_dir), *options])
    return work_dir


def environment() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS='1', CUDA_VISIBLE_DEVICES='')


def driver_command(tmp_path: Path, marker: Path, moment: str, config: Path, work_dir: Path,
                   options: tuple[str, ...] = ()) -> list[str]:
    """tools/train.py run through the driver, stopping at ``moment`` and saying so in
    ``marker``."""
    driver = tmp_path / 'driver.py'
    driver.write_text(DRIVER)
    return [sys.executable, str(driver), str(marker), moment, str(REPO), str(config),
            '--work-dir', str(work_dir), *options]


def kill_at(moment: str, config: Path, work_dir: Path, tmp_path: Path,
            number: signal.Signals = signal.SIGKILL, options: tuple[str, ...] = ()) -> int:
    """Send signal ``number`` to the run's process group (its DataLoader workers too, as a
    scheduler does) at ``moment``; return the run's exit status."""
    marker = tmp_path / 'stopped'
    process = subprocess.Popen(
        driver_command(tmp_path, marker, moment, config, work_dir, options), env=environment(),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 240
    while not marker.exists():
        if process.poll() is not None:
            pytest.fail(f'the run ended before {moment}: {process.stderr.read().decode()[-2000:]}')
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f'the run did not reach {moment}')
        time.sleep(0.2)
    os.killpg(process.pid, number)
    try:
        returncode = process.wait(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.stderr.close()
    return returncode


def resume(config: Path, work_dir: Path, monkeypatch) -> tuple[list[int], list[str]]:
    """Resume the run with ``--resume``; return the iterations it trained and the files it
    wrote, in order."""
    iterations, written = [], []
    run_iter, atomic_open = PhasedTrainLoop.run_iter, xmr.fileio.atomic_open

    def recording_run_iter(self, data_batch):
        iterations.append(self.iter)
        run_iter(self, data_batch)

    def recording_open(path, *args, **kwargs):
        written.append(os.path.basename(str(path)))
        return atomic_open(path, *args, **kwargs)

    monkeypatch.setattr(PhasedTrainLoop, 'run_iter', recording_run_iter)
    monkeypatch.setattr(xmr.fileio, 'atomic_open', recording_open)
    train(config, work_dir, '--resume')
    return iterations, written


def assert_resumed_at(start: int, work_dir: Path, config: Path, monkeypatch) -> None:
    """Resume the run: it must train iterations ``start`` to 15 alone and write no
    checkpoint of an iteration before ``start`` (a run restarted from iteration 0 would)."""
    iterations, written = resume(config, work_dir, monkeypatch)
    assert iterations == list(range(start, 16))
    assert [name for name in written if name.startswith('iter_')] == [
        f'iter_{i}.pth' for i in range(start + 1, 17) if i % 4 == 0]


def assert_same_run(work_dir: Path, reference: Path) -> None:
    """The final weights, optimiser state and phase report of the uninterrupted run in
    ``reference``, bit for bit: one process, one thread, seeded streams restored."""
    assert_same_checkpoint(work_dir / 'iter_16.pth', reference / 'iter_16.pth')
    assert read_report(work_dir) == read_report(reference)


def test_a_kill_while_a_checkpoint_is_written_leaves_the_previous_one_and_resumes(
        tiny_config, uninterrupted, tmp_path, monkeypatch):
    work_dir = tmp_path / 'work'
    kill_at('iter_8.pth', tiny_config, work_dir, tmp_path)
    # Half of iter_8.pth lies under a temporary name only; iter_4.pth, which it was to
    # replace (max_keep_ckpts=1), is intact and is the latest.
    assert not (work_dir / 'iter_8.pth').exists()
    partial = list(work_dir.glob('.iter_8.pth.*.tmp'))
    assert len(partial) == 1 and partial[0].stat().st_size > 0
    assert (work_dir / 'last_checkpoint').read_text() == str(work_dir / 'iter_4.pth')
    assert (work_dir / LOCK_NAME).exists()  # left by the killed run

    assert_resumed_at(4, work_dir, tiny_config, monkeypatch)
    assert not list(work_dir.glob('.*.tmp'))
    assert not (work_dir / LOCK_NAME).exists()
    assert_same_run(work_dir, uninterrupted)


def test_a_kill_in_the_middle_of_a_phase_resumes_to_the_uninterrupted_weights(
        tiny_config, uninterrupted, tmp_path, monkeypatch):
    work_dir = tmp_path / 'work'
    kill_at('iteration 10', tiny_config, work_dir, tmp_path)  # cross_lingual: iterations 4-11
    assert sorted(p.name for p in work_dir.glob('*.pth')) == ['iter_8.pth']
    assert_resumed_at(8, work_dir, tiny_config, monkeypatch)
    assert_same_run(work_dir, uninterrupted)


def test_sigterm_saves_the_iteration_under_way_and_resumes_to_the_uninterrupted_weights(
        tiny_config, uninterrupted, tmp_path, monkeypatch):
    work_dir = tmp_path / 'work'
    # Two workers read the cross-lingual batches: the signal reaches them too.
    status = kill_at('SIGTERM at iteration 10', tiny_config, work_dir, tmp_path, signal.SIGTERM,
                     ('--cfg-options', 'train_dataloader.num_workers=2'))
    assert status == 128 + signal.SIGTERM  # a run cut short, as the signal's own exit
    # Iteration 10 (the 11th) ended and was saved; the periodic checkpoint was iter_8.pth.
    assert (work_dir / 'last_checkpoint').read_text() == str(work_dir / 'iter_11.pth')
    assert not (work_dir / LOCK_NAME).exists()  # the run ended through its hooks
    assert_resumed_at(11, work_dir, tiny_config, monkeypatch)
    assert_same_run(work_dir, uninterrupted)


def test_a_kill_while_a_phase_best_is_written_leaves_no_partial_file_and_resumes(
        best_config, tmp_path_factory, tmp_path, monkeypatch):
    """Half of ``phase_best/cross_lingual_iter_6.pth`` written, then SIGKILL: the resumed run
    wrote the file again, and the killed run's ``.cross_lingual_iter_6.pth.<pid>.tmp`` stayed
    beside it for good. Expected: removed when the resumed run starts, the run otherwise the
    uninterrupted one."""
    reference = train(best_config, tmp_path_factory.mktemp('uninterrupted_best'))
    work_dir = tmp_path / 'work'
    kill_at('cross_lingual_iter_6.pth', best_config, work_dir, tmp_path)
    assert len(list((work_dir / 'phase_best').glob('.cross_lingual_iter_6.pth.*.tmp'))) == 1
    assert_resumed_at(4, work_dir, best_config, monkeypatch)
    assert sorted(path.name for path in (work_dir / 'phase_best').iterdir()) == sorted(
        path.name for path in (reference / 'phase_best').iterdir())
    assert_same_run(work_dir, reference)
