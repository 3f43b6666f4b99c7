"""A phase that starts from the previous phase's best validation (``start_from_best``)."""
from __future__ import annotations

import copy
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp
from mmengine.runner import Runner, ValLoop

from tests.engine.test_loops import PHASES, make_cfg, train, with_validation
from xmr.engine.loops import PhasedTrainLoop
from xmr.engine.phase_best import PhaseBest
from xmr.engine.phases import Phase
from xmr.registry import MODELS

# cross_lingual: iterations 0-8, validated at 2, 4, 6 and 8; cross_modal: 8-12.
TWO_PHASES = [PHASES[1], dict(PHASES[2], start_from_best='mAR')]
# The scripted fixture's record, as the forked DDP workers see it.
_FORKED_STATE: dict = {}


def branch(runner) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in runner.model.named_parameters()
            if name.startswith('language_branch.')}


@pytest.fixture
def scripted(monkeypatch):
    """Validations score ``scores[iteration]`` (mAR) and snapshot the branch's weights there;
    each phase's entry snapshots the weights it starts from."""
    state = dict(scores={}, at_validation={}, at_entry={})

    def run(loop):
        iteration = loop.runner.train_loop.iter
        state['at_validation'][iteration] = branch(loop.runner)
        return {'mAR': state['scores'].get(iteration, 0.0)}

    enter = PhasedTrainLoop._enter_phase

    def entered(loop, index, fresh):
        iterator = enter(loop, index, fresh)
        state['at_entry'][loop.phases[index].name] = branch(loop.runner)
        return iterator

    monkeypatch.setattr(ValLoop, 'run', run)
    monkeypatch.setattr(PhasedTrainLoop, '_enter_phase', entered)
    return state


def equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_next_phase_starts_from_the_best_validation_and_keeps_only_its_file(tmp_path,
                                                                               scripted):
    scripted['scores'].update({2: 1.0, 4: 5.0, 6: 3.0, 8: 2.0})
    torch.manual_seed(0)
    runner, _ = train(with_validation(make_cfg(tmp_path / 'best', phases=TWO_PHASES)))
    start = scripted['at_entry']['cross_modal']
    assert equal(start, scripted['at_validation'][4])
    assert not equal(start, scripted['at_validation'][8])  # the last weights it skipped
    assert sorted(p.name for p in (tmp_path / 'best' / 'phase_best').iterdir()) == [
        'cross_lingual_iter_4.pth']
    assert runner.message_hub.get_info('phase_best/cross_lingual') == dict(
        score=5.0, iteration=4,
        path=str((tmp_path / 'best' / 'phase_best' / 'cross_lingual_iter_4.pth').resolve()))

    last = copy.deepcopy(TWO_PHASES)
    last[1]['start_from_best'] = None
    torch.manual_seed(0)
    train(with_validation(make_cfg(tmp_path / 'last', phases=last)))
    assert equal(scripted['at_entry']['cross_modal'], scripted['at_validation'][8])
    assert not (tmp_path / 'last' / 'phase_best').exists()


def test_resume_reads_the_best_its_checkpoint_records_not_a_killed_run_s_later_file(
        tmp_path, scripted):
    """A run killed after its validation at 6 wrote a better file there; its checkpoint at 6,
    written before that validation, records the best at 4. The run resumed from it scores 6
    lower (another timeline) and must start cross_modal from 4's weights, as the uninterrupted
    run with those scores does."""
    scores = {2: 1.0, 4: 5.0, 6: 0.0, 8: 2.0}
    scripted['scores'].update(scores)
    torch.manual_seed(0)
    whole, _ = train(with_validation(make_cfg(tmp_path / 'whole', phases=TWO_PHASES)))
    expected_start = scripted['at_entry']['cross_modal']

    scripted['scores'].update({6: 9.0})
    torch.manual_seed(0)
    train(with_validation(make_cfg(tmp_path / 'cut', phases=TWO_PHASES, checkpoint_interval=2,
                                   stop_after=7)))
    scripted['scores'].update(scores)
    resumed, _ = train(with_validation(make_cfg(
        tmp_path / 'cut', phases=TWO_PHASES, checkpoint_interval=2,
        resume_from=tmp_path / 'cut' / 'iter_6.pth')))
    assert equal(scripted['at_entry']['cross_modal'], expected_start)
    assert equal(branch(resumed), branch(whole))
    assert sorted(p.name for p in (tmp_path / 'cut' / 'phase_best').iterdir()) == [
        'cross_lingual_iter_4.pth']


def test_a_fork_resumed_at_the_phase_end_starts_from_the_best_of_the_run_it_forks(tmp_path,
                                                                                   scripted):
    scripted['scores'].update({2: 1.0, 4: 5.0, 6: 3.0, 8: 2.0})
    torch.manual_seed(0)
    whole, _ = train(with_validation(make_cfg(tmp_path / 'whole', phases=TWO_PHASES,
                                              checkpoint_interval=8)))
    torch.manual_seed(0)
    resumed, _ = train(with_validation(make_cfg(
        tmp_path / 'again', phases=TWO_PHASES, resume_from=tmp_path / 'whole' / 'iter_8.pth')))
    assert equal(scripted['at_entry']['cross_modal'], scripted['at_validation'][4])
    assert equal(branch(resumed), branch(whole))
    # The fork read the file of the run it forked, and removed none of that run's files.
    assert (tmp_path / 'whole' / 'phase_best' / 'cross_lingual_iter_4.pth').is_file()


def test_a_phase_resumed_in_its_middle_goes_on_from_its_checkpoint_not_from_the_best(
        tmp_path, scripted):
    """cross_modal started from the best at 4; resumed at 10, in its middle, it goes on from
    the weights it trained to by 10, as the uninterrupted run did."""
    scripted['scores'].update({2: 1.0, 4: 5.0, 6: 3.0, 8: 2.0})
    torch.manual_seed(0)
    whole, _ = train(with_validation(make_cfg(tmp_path / 'whole', phases=TWO_PHASES,
                                              checkpoint_interval=10)))
    resumed, _ = train(with_validation(make_cfg(
        tmp_path / 'resumed', phases=TWO_PHASES, resume_from=tmp_path / 'whole' / 'iter_10.pth')))
    assert equal(branch(resumed), branch(whole))


def test_start_from_best_is_refused_where_nothing_can_be_picked(tmp_path, scripted):
    first = [dict(PHASES[1], start_from_best='mAR'), PHASES[2]]
    with pytest.raises(ValueError, match='the first phase has none'):
        train(with_validation(make_cfg(tmp_path / 'first', phases=first)))
    with pytest.raises(ValueError, match='phase cross_modal: .*phase cross_lingual, which is '
                                         'never validated'):
        train(make_cfg(tmp_path / 'unvalidated', phases=TWO_PHASES))
    other = copy.deepcopy(TWO_PHASES)
    other[1]['start_from_best'] = 'rSum@5'
    with pytest.raises(KeyError, match=r"train_cfg.phases.1.start_from_best='rSum@5': the "
                                       r"validation will report no such metric \(did you mean "
                                       r"'rSum'\?\)"):
        train(with_validation(make_cfg(tmp_path / 'metric', phases=other)))
    with pytest.raises(ValueError, match='start_from_best=3 must be'):
        train(with_validation(make_cfg(tmp_path / 'type',
                                       phases=[PHASES[1], dict(PHASES[2], start_from_best=3)])))


def test_a_moved_work_dir_resumed_at_the_phase_end_reads_its_own_file(tmp_path, scripted):
    """The checkpoint records the file's absolute path; a work dir moved (or copied) elsewhere
    holds it under its own ``phase_best/``, as ``last_checkpoint`` is read (work_dir.py)."""
    scripted['scores'].update({2: 1.0, 4: 5.0, 6: 3.0, 8: 2.0})
    torch.manual_seed(0)
    whole, _ = train(with_validation(make_cfg(tmp_path / 'whole', phases=TWO_PHASES)))
    torch.manual_seed(0)
    train(with_validation(make_cfg(tmp_path / 'cut', phases=TWO_PHASES, checkpoint_interval=8,
                                   stop_after=8)))
    (tmp_path / 'cut').rename(tmp_path / 'moved')
    resumed, _ = train(with_validation(make_cfg(
        tmp_path / 'moved', phases=TWO_PHASES, checkpoint_interval=8,
        resume_from=tmp_path / 'moved' / 'iter_8.pth')))
    assert equal(scripted['at_entry']['cross_modal'], scripted['at_validation'][4])
    assert equal(branch(resumed), branch(whole))


def test_a_copied_work_dir_reads_and_keeps_its_own_file_not_the_original_s(tmp_path, scripted):
    """A copy resumed beside its original reads the copy's file and keeps it; the original's
    file, changed here to tell the two apart, is neither read nor removed."""
    scripted['scores'].update({2: 1.0, 4: 5.0, 6: 3.0, 8: 2.0})
    torch.manual_seed(0)
    train(with_validation(make_cfg(tmp_path / 'cut', phases=TWO_PHASES, checkpoint_interval=8,
                                   stop_after=8)))
    shutil.copytree(tmp_path / 'cut', tmp_path / 'copy')
    original = tmp_path / 'cut' / 'phase_best' / 'cross_lingual_iter_4.pth'
    torch.save({name: value + 1 for name, value in torch.load(original).items()}, original)
    train(with_validation(make_cfg(tmp_path / 'copy', phases=TWO_PHASES, checkpoint_interval=8,
                                   resume_from=tmp_path / 'copy' / 'iter_8.pth')))
    assert equal(scripted['at_entry']['cross_modal'], scripted['at_validation'][4])
    assert (tmp_path / 'copy' / 'phase_best' / 'cross_lingual_iter_4.pth').is_file()
    assert original.is_file()


def _ddp_worker(rank: int, port: int, work_dir: str, out_dir: str) -> None:
    from tests.engine.test_distributed import _start
    from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
    from xmr.engine.distributed import setup_cpu_distributed

    _start(rank, port)
    cfg = with_validation(make_cfg(Path(work_dir), phases=TWO_PHASES))
    # RecordingHook reads the model unwrapped.
    cfg.custom_hooks = [h for h in cfg.custom_hooks if h['type'] != 'RecordingHook']
    cfg.launcher = 'pytorch'
    setup_cpu_distributed(cfg, 'pytorch')
    allow_mmengine_checkpoint_types()
    Runner.from_cfg(cfg).train()
    state = _FORKED_STATE  # the forked copy of the scripted fixture's record
    torch.save(dict(entry=state['at_entry']['cross_modal'], best=state['at_validation'][4]),
               Path(out_dir) / f'rank{rank}.pt')
    torch.distributed.destroy_process_group()


def test_every_ddp_rank_starts_from_the_file_the_main_process_wrote(tmp_path, monkeypatch,
                                                                    scripted):
    """Rank 0 alone writes the best's weights; each rank reads them after a barrier, so the two
    gloo processes start cross_modal from the same best weights."""
    from tests.engine.test_distributed import WORLD, free_port

    global _FORKED_STATE
    scripted['scores'].update({2: 1.0, 4: 5.0, 6: 3.0, 8: 2.0})
    _FORKED_STATE = scripted
    MODELS.import_from_location()
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    mp.start_processes(_ddp_worker, args=(free_port(), str(tmp_path / 'ddp'), str(tmp_path)),
                       nprocs=WORLD, join=True, start_method='fork')
    ranks = [torch.load(tmp_path / f'rank{r}.pt') for r in range(WORLD)]
    for rank in ranks:
        assert equal(rank['entry'], rank['best'])
        assert equal(rank['entry'], ranks[0]['entry'])
    assert [p.name for p in (tmp_path / 'ddp' / 'phase_best').iterdir()] == [
        'cross_lingual_iter_4.pth']


@pytest.mark.parametrize('val_interval, at_start, at_end, validated', [
    (4, False, False, False),  # validates at 4 and 8: the phase before ends at 4, this at 7
    (7, False, False, True),  # at its last iteration
    (2, False, False, True),  # at 6
    (0, True, False, True),
    (0, False, True, True),
])
def test_a_tracked_phase_counts_as_validated_only_by_a_validation_inside_it(
        val_interval, at_start, at_end, validated):
    """The tracked phase trains iterations 5-7 (start 4, end 7); a validation at iteration 4
    belongs to the phase before it."""
    before = Phase.from_config(1, dict(PHASES[1], iters=3, validate_at_start=at_start))
    before.start = 4
    after = Phase.from_config(2, dict(PHASES[2], start_from_best='mAR'))
    best = PhaseBest([before, after])
    if validated:
        best.check_validated(True, val_interval, at_end)
    else:
        with pytest.raises(ValueError, match='phase cross_modal: .* phase cross_lingual, which '
                                             'is never validated'):
            best.check_validated(True, val_interval, at_end)
    with pytest.raises(ValueError, match='give the run a val_dataloader'):
        best.check_validated(False, val_interval, at_end)  # nothing validates without a loop


@pytest.mark.parametrize('scores, warned', [
    (((2, 0.25), (4, 0.5), (6, 0.5), (8, 0.25)), 0),
    (((2, math.nan), (4, 0.5), (6, math.nan), (8, 0.25)), 2),
], ids=['tie', 'nan'])
def test_the_best_is_the_first_greatest_score_and_never_a_nan(tmp_path, scores, warned):
    """Greater is better: a tie is no improvement, so the first iteration to reach it stays.
    NaN compares False with every best: taken as an improvement, a diverged model's weights
    would be the ones the next phase starts from; each is warned of."""
    from mmengine.logging import MessageHub

    before = Phase.from_config(1, PHASES[1])
    best = PhaseBest([before, Phase.from_config(2, dict(PHASES[2], start_from_best='mAR'))])
    model = torch.nn.Linear(2, 1)
    warnings = []
    runner = SimpleNamespace(message_hub=MessageHub(f'best_{warned}'), work_dir=str(tmp_path),
                             model=model, logger=SimpleNamespace(info=lambda message: None,
                                                                 warning=warnings.append))
    for iteration, score in scores:
        with torch.no_grad():
            model.bias.fill_(iteration)
        best.record(runner, before, {'mAR': score}, iteration)
    kept = runner.message_hub.get_info('phase_best/cross_lingual')
    assert (kept['score'], kept['iteration']) == (0.5, 4)
    assert torch.load(kept['path'])['bias'].item() == 4.0
    assert len(warnings) == warned
    assert not warnings or 'mAR is NaN at iteration 6' in warnings[1]


def test_restoring_keeps_only_the_best_file_of_a_phase_named_with_glob_characters(tmp_path):
    from mmengine.logging import MessageHub

    before = Phase.from_config(1, dict(PHASES[1], name='stage[1]'))
    after = Phase.from_config(2, dict(PHASES[2], start_from_best='mAR'))
    model = torch.nn.Linear(2, 1)
    runner = SimpleNamespace(message_hub=MessageHub('glob_name'), work_dir=str(tmp_path),
                             model=model, logger=SimpleNamespace(info=lambda message: None))
    best = PhaseBest([before, after])
    best.record(runner, before, {'mAR': 0.25}, 2)
    best.record(runner, before, {'mAR': 0.5}, 4)
    best.restore(runner, before, after)
    assert sorted(p.name for p in (tmp_path / 'phase_best').iterdir()) == ['stage[1]_iter_4.pth']


def test_a_best_file_holding_a_parameter_the_model_lacks_is_refused_by_name(tmp_path):
    from mmengine.logging import MessageHub

    before = Phase.from_config(1, PHASES[1])
    after = Phase.from_config(2, dict(PHASES[2], start_from_best='mAR'))
    path = PhaseBest.path(tmp_path, before, 4)
    path.parent.mkdir()
    torch.save({'bias': torch.zeros(1), 'adapters.de.weight': torch.zeros(2)}, path)
    hub = MessageHub('unknown_parameter')
    hub.update_info('phase_best/cross_lingual', dict(score=0.5, iteration=4, path=str(path)))
    model = torch.nn.Linear(2, 1)
    bias = model.bias.detach().clone()
    runner = SimpleNamespace(message_hub=hub, work_dir=str(tmp_path), model=model,
                             logger=SimpleNamespace(info=lambda message: None))
    with pytest.raises(RuntimeError, match=r"parameters \['adapters.de.weight'\] are not in "
                                           'the model'):
        PhaseBest([before, after]).restore(runner, before, after)
    assert torch.equal(model.bias, bias)  # nothing was loaded


def test_the_buffers_of_trained_modules_go_back_with_their_weights_and_others_stay(tmp_path):
    """A BatchNorm of a user's adapter started the next phase with the best's weights and the
    last iteration's running statistics, a pair that never ran; a loss's counter, in a module
    that trains nothing, and a frozen module's statistics keep their values."""
    from mmengine.logging import MessageHub

    model = torch.nn.ModuleDict(dict(adapter=torch.nn.BatchNorm1d(2),
                                     frozen=torch.nn.BatchNorm1d(2), loss=torch.nn.Module()))
    model.frozen.requires_grad_(False)
    model.loss.register_buffer('pairs_seen', torch.zeros((), dtype=torch.long))
    before = Phase.from_config(1, PHASES[1])
    after = Phase.from_config(2, dict(PHASES[2], start_from_best='mAR'))
    runner = SimpleNamespace(message_hub=MessageHub('buffers'), work_dir=str(tmp_path),
                             model=model, logger=SimpleNamespace(info=lambda message: None))
    best = PhaseBest([before, after])

    def step(value: float) -> None:
        with torch.no_grad():
            for norm in (model.adapter, model.frozen):
                norm.weight.fill_(value)
                norm.running_mean.fill_(value)
            model.loss.pairs_seen.fill_(int(value))

    step(4)
    best.record(runner, before, {'mAR': 0.5}, 4)
    assert sorted(torch.load(best.path(tmp_path, before, 4))) == [
        'adapter.bias', 'adapter.num_batches_tracked', 'adapter.running_mean',
        'adapter.running_var', 'adapter.weight']
    step(8)
    best.restore(runner, before, after)
    assert model.adapter.weight.tolist() == model.adapter.running_mean.tolist() == [4, 4]
    assert model.frozen.weight.tolist() == model.frozen.running_mean.tolist() == [8, 8]
    assert model.loss.pairs_seen.item() == 8


def test_no_phase_starting_from_a_best_asks_for_no_validation():
    """A run without start_from_best needs no val_dataloader, and keeps no weights."""
    before, after = Phase.from_config(1, PHASES[1]), Phase.from_config(2, PHASES[2])
    best = PhaseBest([before, after])
    best.check_validated(False, 0, False)
    assert best.pairs == []


def test_partial_files_of_a_killed_run_are_removed_by_the_main_process_alone(tmp_path,
                                                                             monkeypatch):
    """``.<name>.<pid>.tmp`` of no running process (pid 0), a best's write cut short."""
    from xmr.engine import phase_best

    partial = tmp_path / 'phase_best' / '.cross_lingual_iter_4.pth.0.tmp'
    partial.parent.mkdir()
    partial.write_bytes(b'half a file')
    warnings = []
    runner = SimpleNamespace(work_dir=str(tmp_path), logger=SimpleNamespace(
        warning=warnings.append))
    best = PhaseBest([Phase.from_config(1, PHASES[1]), Phase.from_config(2, PHASES[2])])
    monkeypatch.setattr(phase_best, 'is_main_process', lambda: False)
    best.remove_partial_files(runner)
    assert partial.is_file() and warnings == []
    monkeypatch.setattr(phase_best, 'is_main_process', lambda: True)
    best.remove_partial_files(runner)
    assert not partial.exists()
    assert warnings == [f'removed {partial}, a partial file of an interrupted run']


def test_a_relative_work_dir_records_the_best_s_absolute_path(tmp_path, monkeypatch):
    """A fork, resumed from another directory, reads the file the checkpoint records."""
    from mmengine.logging import MessageHub

    monkeypatch.chdir(tmp_path)
    before = Phase.from_config(1, PHASES[1])
    runner = SimpleNamespace(message_hub=MessageHub('relative'), work_dir='work',
                             model=torch.nn.Linear(2, 1),
                             logger=SimpleNamespace(info=lambda message: None))
    PhaseBest([before, Phase.from_config(2, dict(PHASES[2], start_from_best='mAR'))]).record(
        runner, before, {'mAR': 0.5}, 4)
    assert runner.message_hub.get_info('phase_best/cross_lingual')['path'] == str(
        (tmp_path / 'work' / 'phase_best' / 'cross_lingual_iter_4.pth').resolve())


def test_a_rank_reads_the_best_only_after_the_barrier_the_main_process_writes_it_before(
        tmp_path, monkeypatch):
    """On a rank other than the main process the file is in place once the barrier returns."""
    from mmengine.logging import MessageHub

    from xmr.engine import phase_best

    before = Phase.from_config(1, PHASES[1])
    after = Phase.from_config(2, dict(PHASES[2], start_from_best='mAR'))
    path = PhaseBest.path(tmp_path, before, 4)
    hub = MessageHub('barrier')
    hub.update_info('phase_best/cross_lingual', dict(score=0.5, iteration=4, path=str(path)))

    def main_process_writes_meanwhile() -> None:
        path.parent.mkdir()
        torch.save({'bias': torch.full((1,), 4.0)}, path)

    monkeypatch.setattr(phase_best, 'barrier', main_process_writes_meanwhile)
    monkeypatch.setattr(phase_best, 'is_main_process', lambda: False)
    model = torch.nn.Linear(2, 1)
    runner = SimpleNamespace(message_hub=hub, work_dir=str(tmp_path), model=model,
                             logger=SimpleNamespace(info=lambda message: None))
    PhaseBest([before, after]).restore(runner, before, after)
    assert model.bias.item() == 4.0


def test_the_trained_state_leaves_out_frozen_parameters_and_buffers_of_modules_training_nothing():
    """The adapter trains its weight, not its bias; the model itself holds no parameter, only a
    buffer (a step counter), though a module inside it trains."""
    from xmr.engine.phase_best import trained_state

    model = torch.nn.ModuleDict(dict(adapter=torch.nn.Linear(2, 2)))
    model.adapter.bias.requires_grad_(False)
    model.register_buffer('steps', torch.zeros((), dtype=torch.long))
    assert sorted(trained_state(model)) == ['adapter.weight']
