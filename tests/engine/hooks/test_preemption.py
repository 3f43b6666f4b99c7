"""PreemptionHook: a SIGTERM that lands while the ranks exchange their signals is not lost; one
after the last iteration stops nothing, and tools/train.py exits 0."""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from mmengine.hooks import Hook

from tests.conftest import REPO, assert_same_checkpoint
from tests.engine.hooks.test_phase_report_hook import read_report, report_cfg
from tests.engine.test_loops import PHASES, make_cfg, train
from xmr.engine import loops
from xmr.engine.hooks import preemption
from xmr.engine.hooks.checkpoint import FINISHED_MARKER, CheckpointHook
from xmr.registry import HOOKS

sys.path.insert(0, str(REPO / 'tools'))
import train as train_tool  # noqa: E402


def test_a_signal_landing_during_the_exchange_stops_the_run_one_iteration_later(
        tmp_path, monkeypatch):
    """The exchange's answer (no rank had a signal when it started) must not erase a signal
    that landed while it ran: that one is exchanged, and acted on, at the next iteration."""
    exchange = preemption.max_over_ranks
    exchanged = []

    def signal_lands_during_the_exchange(value: int) -> int:
        agreed = exchange(value)
        exchanged.append(value)
        if len(exchanged) == 2:  # after iteration 2, while this rank waits for the others
            os.kill(os.getpid(), signal.SIGTERM)
        return agreed

    monkeypatch.setattr(preemption, 'max_over_ranks', signal_lands_during_the_exchange)
    cfg = make_cfg(tmp_path, phases=PHASES[1:2])  # 8 iterations
    cfg.custom_hooks.append(dict(type='PreemptionHook'))
    torch.manual_seed(0)
    _, records = train(cfg)
    assert exchanged == [0, 0, signal.SIGTERM]
    assert len(records) == 3  # stopped after iteration 3, the one after the signal
    assert (tmp_path / 'iter_3.pth').is_file()


@HOOKS.register_module(force=True)
class SignalAtValidationHook(Hook):
    """Sends SIGTERM to this process as the validation at iteration ``at`` starts."""

    def __init__(self, at: int) -> None:
        self.at = at

    def before_val_epoch(self, runner) -> None:
        if runner.iter == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


def exit_status(argv: list[str]) -> int:
    try:
        train_tool.main(argv)
    except SystemExit as error:
        return error.code
    return 0


@pytest.mark.parametrize('at, status, logged', [
    (4, 128 + signal.SIGTERM, 'SIGTERM received: stopped after iteration 4'),
    (16, 0, 'SIGTERM received after the last iteration: training had finished')])
def test_the_train_tool_exits_with_the_signal_only_when_it_cut_training_short(
        tmp_path, at, status, logged):
    """Iteration 4 ends a phase of three, where the run stops; 16, the last, is the final
    validation's."""
    work_dir = tmp_path / 'work'
    cfg = report_cfg(work_dir)
    cfg.custom_hooks += [dict(type='PreemptionHook'), dict(type='SignalAtValidationHook', at=at)]
    config = tmp_path / 'signalled.py'
    cfg.dump(str(config))
    torch.manual_seed(0)
    handler_before = signal.getsignal(signal.SIGTERM)
    assert exit_status([str(config), '--work-dir', str(work_dir)]) == status
    log = next(work_dir.glob('*/*.log')).read_text()
    assert logged in log
    assert log.count('SIGTERM received') == 1  # cut short, or after the end: never both
    # The mark of a run's end, which a run cut short had too.
    assert (work_dir / FINISHED_MARKER).exists() == (status == 0)
    assert signal.getsignal(signal.SIGTERM) is handler_before  # a finished run hands it back


@HOOKS.register_module(force=True)
class SignalAfterIterationHook(Hook):
    """Sends SIGTERM to this process as iteration ``at`` ends: after CheckpointHook's periodic
    save (registered before it at the same priority), before PreemptionHook (the lowest)."""

    priority = 'VERY_LOW'

    def __init__(self, at: int) -> None:
        self.at = at

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        if runner.iter + 1 == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


def signalled_cfg(work_dir, at: int, **options):
    cfg = make_cfg(work_dir, phases=PHASES[1:2], **options)  # 8 iterations
    cfg.custom_hooks += [dict(type='SignalAfterIterationHook', at=at), dict(type='PreemptionHook')]
    return cfg


@pytest.mark.parametrize('at, saved', [(3, [3]), (4, [4])])
def test_the_iteration_a_signal_stops_at_is_saved_once(tmp_path, monkeypatch, at, saved):
    """Iteration 4 is a periodic checkpoint's: CheckpointHook saved it already."""
    steps = []
    save = CheckpointHook._save_checkpoint_with_step

    def recorded(hook, runner, step, meta):
        steps.append(step)
        save(hook, runner, step, meta)

    monkeypatch.setattr(CheckpointHook, '_save_checkpoint_with_step', recorded)
    torch.manual_seed(0)
    cfg = signalled_cfg(tmp_path, at, checkpoint_interval=4)
    cfg.default_hooks.checkpoint.max_keep_ckpts = 2
    runner, records = train(cfg)
    assert len(records) == at
    assert steps == saved
    saver = next(h for h in runner.hooks if isinstance(h, CheckpointHook))
    assert saver.interim_step == (at if at % 4 else None)  # a periodic one's iteration: kept
    assert sorted(p.name for p in tmp_path.glob('*.pth')) == [f'iter_{at}.pth']


def test_without_a_checkpoint_hook_a_signal_stops_the_run_and_says_nothing_was_saved(tmp_path):
    cfg = signalled_cfg(tmp_path, 3)
    cfg.default_hooks.checkpoint = None
    torch.manual_seed(0)
    runner, records = train(cfg)
    assert len(records) == 3
    assert not list(tmp_path.glob('*.pth'))
    assert ('SIGTERM received: stopped after iteration 3 (no CheckpointHook: nothing was '
            'saved)') in next(tmp_path.glob('*/*.log')).read_text()


def test_a_signal_at_the_iteration_another_hook_stops_at_claims_no_cut(tmp_path):
    """The run ends there anyway, as that hook meant: nothing is saved for the signal, and it
    does not count as cut short (tools/train.py exits 0)."""
    cfg = signalled_cfg(tmp_path, 3, stop_after=3)
    torch.manual_seed(0)
    runner, records = train(cfg)
    assert len(records) == 3
    assert not list(tmp_path.glob('*.pth'))
    hook = next(h for h in runner.hooks if isinstance(h, preemption.PreemptionHook))
    assert (hook.received, hook.stopped_by) == (signal.SIGTERM, None)


def test_a_new_training_starts_with_no_signal_noted():
    hook = preemption.PreemptionHook()
    hook.received = hook.stopped_by = signal.SIGTERM  # what a run cut short leaves
    hook.before_train(runner=None)
    try:
        assert (hook.received, hook.stopped_by) == (None, None)
    finally:
        hook.after_train(runner=None)


def test_a_run_driven_from_another_thread_keeps_the_sigterm_handler():
    """Python takes signal handlers in the main thread only (a notebook's executor runs others)."""
    hook = preemption.PreemptionHook()
    handler = signal.getsignal(signal.SIGTERM)
    errors = []

    def start() -> None:
        try:
            hook.before_train(runner=None)
        except Exception as error:  # what the thread would die of
            errors.append(error)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    assert errors == []
    assert signal.getsignal(signal.SIGTERM) is handler


def test_the_handler_is_handed_back_once():
    """A failure after training had ended (a later hook's ``after_train``) must not hand back
    the handler again over one installed since."""
    hook = preemption.PreemptionHook()
    handler = signal.getsignal(signal.SIGTERM)
    hook.before_train(runner=None)
    hook.after_train(runner=None)

    def installed_since(number, frame) -> None:
        pass

    signal.signal(signal.SIGTERM, installed_since)
    try:
        hook.after_failed_train(runner=None)
        assert signal.getsignal(signal.SIGTERM) is installed_since
    finally:
        signal.signal(signal.SIGTERM, handler)


@HOOKS.register_module(force=True)
class SignalTheJobDuringValidationHook(Hook):
    """Sends SIGTERM to this process and its children (the validation's DataLoader workers) as
    the first validation's first batch is in, as a scheduler signals every process of a job."""

    def __init__(self) -> None:
        self.sent = False

    def after_val_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        if self.sent:
            return
        self.sent = True
        children = [int(pid) for task in Path('/proc/self/task').iterdir()
                    for pid in (task / 'children').read_text().split()]
        assert children, 'the validation has no worker to signal'
        for pid in [*children, os.getpid()]:
            os.kill(pid, signal.SIGTERM)


def test_a_signal_during_a_phase_end_s_validation_lets_it_end_and_stops_at_the_phase_end(
        tmp_path):
    """The validation's workers ignore the signal as the phases' do: killed, they failed the
    validation and the run, with no checkpoint of the iterations since the last one. The run
    stops where the phase ends, with its checkpoint: it went on to set up cross_lingual,
    validate its start and train an iteration first, which a scheduler's kill may cut short."""
    cfg = report_cfg(tmp_path, checkpoint_interval=100)
    cfg.val_dataloader.update(batch_size=4, num_workers=1)  # 3 batches
    cfg.custom_hooks += [dict(type='SignalTheJobDuringValidationHook'),
                         dict(type='PreemptionHook')]
    torch.manual_seed(0)
    runner, records = train(cfg)
    assert len(records) == 4  # source_finetune's 4, validated at its end
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path / 'iter_4.pth')
    assert [c['column'] for c in read_report(tmp_path)] == ['source_finetune end']


def test_a_signal_during_a_phase_s_set_up_stops_before_its_first_step_and_resumes_exactly(
        tmp_path, monkeypatch):
    """SIGTERM while cross_lingual builds its feature cache (minutes on a real dataset): the run
    waited for its first iteration to save, and a scheduler's kill that came first lost every
    iteration since the last periodic checkpoint. It stops after the set-up with the
    checkpoint of source_finetune's end, from which the resumed run trains on to the
    uninterrupted run's weights and optimiser state."""
    phases = [PHASES[0], dict(PHASES[1], cache_features=True)]
    torch.manual_seed(0)
    train(make_cfg(tmp_path / 'whole', phases=phases))
    build, calls = loops.prepare_feature_caches, []

    def signalled_build(dataloader, model):
        calls.append(dataloader)
        if len(calls) == 2:  # cross_lingual's (source_finetune's loader has no cache)
            os.kill(os.getpid(), signal.SIGTERM)
        build(dataloader, model)

    monkeypatch.setattr(loops, 'prepare_feature_caches', signalled_build)
    cfg = make_cfg(tmp_path / 'cut', phases=phases)
    cfg.custom_hooks.append(dict(type='PreemptionHook'))
    torch.manual_seed(0)
    runner, records = train(cfg)
    assert len(records) == 4  # source_finetune's
    assert [p.name for p in (tmp_path / 'cut').glob('*.pth')] == ['iter_4.pth']
    monkeypatch.undo()
    torch.manual_seed(1)
    _, resumed = train(make_cfg(tmp_path / 'cut', phases=phases,
                                resume_from=tmp_path / 'cut' / 'iter_4.pth'))
    assert [r['iter'] for r in resumed] == list(range(4, 12))
    assert_same_checkpoint(tmp_path / 'cut' / 'iter_12.pth', tmp_path / 'whole' / 'iter_12.pth')


@pytest.mark.parametrize('preemption_hook', [True, False], ids=['ignoring', 'not_ignoring'])
def test_persistent_workers_end_with_training(tmp_path, preemption_hook):
    """Persistent workers (the shipped loaders') outlived training. Ignoring SIGTERM (under a
    PreemptionHook), they kept tools/train.py from exiting: at the interpreter's exit
    multiprocessing ends daemon processes with SIGTERM and waits for them. Without the hook,
    left to a garbage collection, each took 5 s to end. The runner is kept: nothing of it is
    collected before the check."""
    cfg = report_cfg(tmp_path)
    for loader in (cfg.train_dataloader, cfg.val_dataloader):
        loader.update(num_workers=1, persistent_workers=True)
    if preemption_hook:
        cfg.custom_hooks.append(dict(type='PreemptionHook'))
    before = set(multiprocessing.active_children())
    torch.manual_seed(0)
    runner, _ = train(cfg)
    assert set(multiprocessing.active_children()) <= before
    assert runner.train_dataloader._iterator is None


def test_a_loader_whose_persistent_workers_ended_with_training_starts_new_ones():
    """A notebook validates again after training (runner.val()): the loader must not go on
    with the ended workers' closed queues."""
    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2, num_workers=1,
                                         persistent_workers=True)
    preemption.workers_ignore(loader, [signal.SIGTERM])
    assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3]]
    preemption.end_persistent_workers()
    assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3]]
    preemption.end_persistent_workers()


class WorkerView(torch.utils.data.Dataset):
    """What a worker process sees: whether it ignores SIGTERM, its loader's own init's mark, and
    the signals it blocks (those it started with blocked, unblocked by its init)."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> tuple:
        return (signal.getsignal(signal.SIGTERM) is signal.SIG_IGN,
                os.environ.get('XMR_TEST_WORKER_INIT'), sorted(signal.pthread_sigmask(
                    signal.SIG_BLOCK, [])))


def mark_worker(worker_id: int) -> None:
    os.environ['XMR_TEST_WORKER_INIT'] = f'worker {worker_id}'


def test_workers_ignore_the_signals_and_still_run_the_loaders_own_init():
    loader = torch.utils.data.DataLoader(WorkerView(), batch_size=None, num_workers=1,
                                         worker_init_fn=mark_worker)
    handler = signal.getsignal(signal.SIGTERM)
    preemption.workers_ignore(loader, [signal.SIGTERM])
    preemption.workers_ignore(loader, [signal.SIGTERM])  # a second phase on the same loader
    assert loader.worker_init_fn.init is mark_worker  # wrapped once
    assert [tuple(item) for item in loader] == [(True, 'worker 0', [])] * 2
    assert signal.getsignal(signal.SIGTERM) is handler  # the main process's is its own
    assert 'XMR_TEST_WORKER_INIT' not in os.environ


def stub_runner(iteration: int, hooks: list) -> SimpleNamespace:
    """What :class:`~xmr.engine.hooks.preemption.PreemptionHook` reads of a runner after
    ``iteration`` iterations; ``runner.warnings`` collects its log's warnings."""
    warnings = []
    return SimpleNamespace(iter=iteration, hooks=hooks, work_dir='work',
                           train_loop=SimpleNamespace(stop_training=False), warnings=warnings,
                           logger=SimpleNamespace(warning=warnings.append))


def test_a_signal_only_another_rank_received_stops_this_rank_naming_the_signal(monkeypatch):
    """Under DDP the exchange brings another rank's SIGTERM to a rank that noted none: it stops
    at the same iteration and names the signal as that rank does."""
    monkeypatch.setattr(preemption, 'max_over_ranks', lambda value: signal.SIGTERM)
    hook = preemption.PreemptionHook()
    runner = stub_runner(2, hooks=[hook])
    hook.after_train_iter(runner, batch_idx=2)
    assert runner.train_loop.stop_training
    assert (hook.received, hook.stopped_by) == (signal.SIGTERM, signal.SIGTERM)
    assert runner.warnings == ['SIGTERM received: stopped after iteration 3 (no CheckpointHook: '
                               'nothing was saved)']


def test_under_ddp_the_ranks_wait_for_the_main_process_s_checkpoint_on_the_host_group(
        monkeypatch):
    """A rank that ends at once exits 143, and its launcher stops the others, the main process
    perhaps before its file is in place: the ranks meet on the host's group after the save."""
    events = []
    saver = CheckpointHook(interval=100, by_epoch=False)
    monkeypatch.setattr(saver, 'save_interim_checkpoint',
                        lambda runner, iterations: events.append(('saved', iterations)))
    monkeypatch.setattr(preemption, 'is_distributed', lambda: True)
    monkeypatch.setattr(preemption, 'max_over_ranks', lambda value: value)
    monkeypatch.setattr(preemption, 'host_group', lambda: 'the host group')
    monkeypatch.setattr(preemption.dist, 'barrier',
                        lambda group=None: events.append(('barrier', group)))
    hook = preemption.PreemptionHook()
    hook.received = signal.SIGTERM
    runner = stub_runner(2, hooks=[saver, hook])
    hook.after_train_iter(runner, batch_idx=2)
    assert events == [('saved', 3), ('barrier', 'the host group')]
    assert runner.train_loop.stop_training


def test_a_loader_without_workers_keeps_its_worker_init():
    """Its batches are read in the main process, which handles the signals itself."""
    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2, num_workers=0)
    preemption.workers_ignore(loader, [signal.SIGTERM])
    assert loader.worker_init_fn is None
