"""PhasedTrainLoop under faults: a resume reads no skipped data, bad phases and data languages
are refused before anything trains, and a diverging loss stops the run at once."""
from __future__ import annotations

import copy
import io
import math
import re
import types
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner
from PIL import Image

from tests.conftest import tiny_retriever_cfg
from tests.engine.test_loops import (
    LANGS,
    PAIRS,
    PHASES,
    RecordingHook,
    augmented_images,
    loader,
    loop_of,
    make_cfg,
    train,
)
from xmr.datasets import MediaReadError, MediaSkippedWarning
from xmr.datasets.synthetic.dataset import SyntheticPairDataset
from xmr.engine import loops
from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
from xmr.engine.divergence import DivergenceMonitor, TrainingDivergedError
from xmr.engine.phases import Phase
from xmr.engine.resume import can_skip_at_sampler, skip_at_sampler
from xmr.registry import DATASETS

# cross_lingual crosses a pass of its loader (80 pairs at batch 8 = 10 batches): 4-16, then
# cross_modal (16-20) shares that loader.
LONG_PHASES = [PHASES[0], dict(PHASES[1], iters=12), PHASES[2]]


@DATASETS.register_module(force=True)
class CountingPairDataset(SyntheticPairDataset):
    """The synthetic pairs, recording the index of every item read."""

    reads: list[int] = []

    def __getitem__(self, index: int) -> dict:
        CountingPairDataset.reads.append(index)
        return super().__getitem__(index)


def sampler_order(size: int, seed: int, epoch: int) -> list[int]:
    """MMEngine's DefaultSampler(shuffle=True) order, restated: a permutation seeded seed+epoch."""
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(size, generator=generator).tolist()


def log_text(work_dir: Path) -> str:
    return '\n'.join(path.read_text() for path in work_dir.glob('*/*.log'))


@pytest.fixture(scope='module')
def long_run(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp('long')
    torch.manual_seed(0)
    _, records = train(make_cfg(work_dir, phases=LONG_PHASES, checkpoint_interval=15))
    return work_dir, records


# ------------------------------------------------------------------ item 7: resume
def test_resume_skips_at_the_sampler_reads_nothing_skipped_and_times_no_skip(
        long_run, tmp_path, monkeypatch):
    work_dir, uninterrupted = long_run
    clock = types.SimpleNamespace(now=0.0)

    def tick() -> float:
        clock.now += 1.0
        return clock.now

    def slow_phase_entry(*args) -> None:
        clock.now += 10_000.0  # what building caches or reading 3,290 batches would cost

    monkeypatch.setattr('mmengine.hooks.iter_timer_hook.time', types.SimpleNamespace(time=tick))
    monkeypatch.setattr(loops, 'prepare_feature_caches', slow_phase_entry)
    cfg = make_cfg(tmp_path, phases=LONG_PHASES, resume_from=work_dir / 'iter_15.pth')
    cfg.train_dataloader.dataset.type = 'CountingPairDataset'
    cfg.log_level = 'INFO'
    CountingPairDataset.reads.clear()
    torch.manual_seed(123)
    _, resumed = train(cfg)

    assert [r['iter'] for r in resumed] == list(range(15, 20))
    for mine, reference in zip(resumed, uninterrupted[15:]):
        assert (mine['phase'], mine['lrs'], mine['losses']) == (
            reference['phase'], reference['lrs'], reference['losses'])
    # Iteration 15 is cross_lingual's batch 11 = batch 1 of its second pass; cross_modal then
    # starts its own pass 0. Nothing before batch 1 of pass 1 is read.
    assert CountingPairDataset.reads == (sampler_order(80, 3, 1)[8:16]
                                         + sampler_order(80, 3, 0)[:32])
    assert ('phase cross_lingual: resuming at iteration 15: skipped its first 11 batches at the '
            'sampler (1 whole passes + 1 batches), none read') in log_text(tmp_path)
    # The timer reads the fake clock twice per iteration (data time, then iteration time), so
    # an iteration takes 2 s and ETA = 2 s x iterations left; the 10,000 s phase entries and
    # the skip are not iterations.
    assert [r['eta'] for r in resumed] == [8.0, 6.0, 4.0, 2.0, 0.0]


def test_resume_from_a_checkpoint_without_optimiser_state_warns_that_adam_restarts(
        long_run, tmp_path):
    work_dir, _ = long_run
    allow_mmengine_checkpoint_types()
    checkpoint = torch.load(work_dir / 'iter_15.pth', map_location='cpu', weights_only=True)
    del checkpoint['optimizer']
    torch.save(checkpoint, tmp_path / 'best_mAR_iter_15.pth')
    train(make_cfg(tmp_path, phases=LONG_PHASES, resume_from=tmp_path / 'best_mAR_iter_15.pth',
                   stop_after=16))
    assert ('phase cross_lingual: resumed at iteration 15 from a checkpoint without optimiser '
            'state (best_*.pth keeps only weights): Adam restarts') in log_text(tmp_path)


# ------------------------------------------------------------------ item 9: phase values
@pytest.mark.parametrize('key, value, message', [
    ('lr', 'fast', "lr='fast' must be a positive number"),
    ('lr', 0, 'lr=0 must be a positive number'),
    ('lr', math.inf, 'lr=inf must be a positive number'),
    ('iters', 'abc', "iters must be a positive integer, got 'abc'"),
    ('iters', 2.5, 'iters must be a positive integer, got 2.5'),
    ('iters', True, 'iters must be a positive integer, got True'),
    ('warmup_ratio', 1.0, r'warmup_ratio=1.0 must be a number in \[0, 1\)'),
    ('min_lr_ratio', -0.1, r'min_lr_ratio=-0.1 must be a number in \[0, 1\]'),
    ('schedule', 'cosin', "unknown schedule 'cosin'"),
    ('trainable', 'language_branch', "trainable='language_branch' must be a non-empty list"),
    ('trainable', [], r'trainable=\[\] must be a non-empty list'),
    ('loss_weights', dict(cl='x'), r"loss_weights\['cl'\]='x' must be a finite number >= 0"),
    ('loss_weights', dict(cl=math.nan), r"loss_weights\['cl'\]=nan must be a finite number"),
    ('loss_weights', dict(cl=0), r"loss_weights=\{'cl': 0\} gives no loss a positive weight"),
    ('lr_mult', dict(adapters=-1), r"lr_mult\['adapters'\]=-1 must be a finite number >= 0"),
    ('validate_at_start', 'yes', "validate_at_start='yes' must be True or False"),
    ('cache_features', 'yes', "cache_features='yes' must be True, False or a dict"),
    ('dataloader', 3, 'dataloader=3 must be a dataloader dict or the name'),
])
def test_a_bad_phase_value_names_the_phase_key_and_value(key, value, message):
    with pytest.raises(ValueError, match='phase cross_lingual: ' + message):
        Phase.from_config(1, dict(PHASES[1], **{key: value}))


@pytest.mark.parametrize('name', ['cl/de', '../cl', '/tmp/cl', 'cl\\de', '..'])
def test_a_phase_name_that_is_a_path_is_refused_where_the_phase_is_read(name):
    """A phase's name names its files: under 'cl/de' the best weights went to a folder
    phase_best/cl/ where the next phase's start never found the phase's other files to
    remove them; under '../cl' they went beside the work dir."""
    with pytest.raises(ValueError, match=re.escape(f'phase name {name!r} names files of the run')):
        Phase.from_config(1, dict(PHASES[1], name=name))


def test_an_unknown_phase_key_names_the_phase_and_the_known_keys():
    with pytest.raises(KeyError, match=r"phase 1 \(cross_lingual\): unknown keys \['itres'\]; "
                                       r"a phase has \['cache_features', 'dataloader', "):
        Phase.from_config(1, dict(PHASES[1], itres=8))


def test_a_phase_given_in_part_says_that_a_child_replaces_the_list_whole():
    """A leaf config's ``train_cfg = dict(phases=[dict(iters=40), ...])``: MMEngine replaces
    lists, so the phase holds nothing else."""
    with pytest.raises(KeyError, match=(
            r"phase 2 lacks \['loss_weights', 'lr', 'name', 'trainable'\]; a config that sets "
            r"train_cfg.phases replaces its base's list whole, so restate each phase "
            r"\(dict\(_base_.train_cfg.phases\[2\], iters=...\)\), or change one key with "
            r'--cfg-options train_cfg.phases.2.iters=...')):
        Phase.from_config(2, dict(iters=40))


@pytest.mark.parametrize('bad, message', [
    (dict(lr='fast'), "phase cross_modal: lr='fast' must be a positive number"),
    (dict(loss_weights=dict(cmm=1.0)), r"phase cross_modal: unknown loss weights \['cmm'\]"),
])
def test_the_last_phase_is_checked_when_the_loop_is_built(tmp_path, bad, message):
    phases = copy.deepcopy(PHASES)
    phases[2].update(bad)
    with pytest.raises((ValueError, KeyError), match=message):
        loop_of(make_cfg(tmp_path, phases=phases))


def test_a_loss_the_model_cannot_run_is_refused_when_the_loop_is_built(tmp_path):
    cfg = make_cfg(tmp_path, phases=[dict(PHASES[0]), dict(PHASES[2], trainable=['backbone'])])
    cfg.model = tiny_retriever_cfg(language_branch=None)
    with pytest.raises(ValueError, match=re.escape(
            "phase cross_modal weights ['cm'] need a language_branch")):
        loop_of(cfg)


def runner_that_fails_before_training(cfg) -> tuple[Runner, pytest.ExceptionInfo]:
    allow_mmengine_checkpoint_types()
    runner = Runner.from_cfg(cfg)
    with pytest.raises(ValueError) as error:
        runner.train()
    assert next(h for h in runner.hooks if isinstance(h, RecordingHook)).records == []
    return runner, error


@pytest.mark.parametrize('option, value, message', [
    ('val_interval', 'abc', "train_cfg.val_interval='abc' must be an integer >= 0"),
    ('val_interval', -2, 'train_cfg.val_interval=-2 must be an integer >= 0'),
    ('val_interval', True, 'train_cfg.val_interval=True must be an integer >= 0'),
    ('validate_at_phase_end', 'no', "train_cfg.validate_at_phase_end='no' must be True or"),
])
def test_a_bad_validation_option_fails_before_the_first_step(tmp_path, option, value,
                                                             message):
    cfg = make_cfg(tmp_path)
    cfg.train_cfg[option] = value
    _, error = runner_that_fails_before_training(cfg)
    assert message in str(error.value)


def _val_cfg(cfg):
    cfg.val_dataloader = dict(loader(dict(
        type='SyntheticRetrievalDataset', num_scenes=4, languages=['en', *LANGS], split='val',
        image_size=32, seed=0, captions_per_image=1), batch_size=4), drop_last=False)
    cfg.val_evaluator = dict(type='RetrievalMetric', languages=['en', *LANGS])
    cfg.val_cfg = dict(type='ValLoop')
    for phase in cfg.train_cfg.phases:
        phase.iters = 1
    return cfg


def test_the_media_of_every_dataset_are_checked_before_the_first_step(tmp_path, monkeypatch):
    from xmr.datasets.synthetic.dataset import SyntheticRetrievalDataset

    checked = []
    for kind in (SyntheticPairDataset, SyntheticRetrievalDataset):
        monkeypatch.setattr(kind, 'check_media_exist', lambda self: checked.append(self),
                            raising=False)
    train(_val_cfg(make_cfg(tmp_path)))
    # Two phases share the train loader's dataset: listed once.
    assert [type(dataset).__name__ for dataset in checked] == [
        'SyntheticPairDataset', 'SyntheticPairDataset', 'SyntheticRetrievalDataset']
    assert len({id(dataset) for dataset in checked}) == len(checked)


def test_a_gallery_of_media_the_phases_train_on_is_refused_before_the_first_step(
        tmp_path, monkeypatch):
    """The synthetic sets stand for annotation datasets: training and validation list one
    image file among others (check_held_out's own tests read real Multi30K and XTD10)."""
    from xmr.datasets.annotation import Annotation, MediaRecord
    from xmr.datasets.synthetic.dataset import SyntheticRetrievalDataset

    def images(*names):
        return Annotation(dataset='d', split='s', media_type='image', languages=['en'],
                          items=[MediaRecord(name, f'images/{name}.jpg', {'en': ['a']})
                                 for name in names])

    for kind, ann in ((SyntheticPairDataset, images('1', '2')),
                      (SyntheticRetrievalDataset, images('2', '3'))):
        monkeypatch.setattr(kind, 'annotation', ann, raising=False)
        monkeypatch.setattr(kind, 'media_root', tmp_path / 'media', raising=False)
    _, error = runner_that_fails_before_training(_val_cfg(make_cfg(tmp_path / 'refused')))
    assert str(error.value).startswith(
        'val dataset 0 (SyntheticRetrievalDataset) shares 1 of its 2 media files with phase '
        'source_finetune dataset (source_finetune), e.g. images/2.jpg: ')
    assert str(error.value).endswith('allowed by train_cfg.allow_eval_overlap=True')
    allowed = _val_cfg(make_cfg(tmp_path / 'allowed'))
    allowed.train_cfg.allow_eval_overlap = True
    _, records = train(allowed)
    assert records


def test_a_resumed_run_checks_the_data_of_the_phases_still_to_run_only(long_run, tmp_path,
                                                                       monkeypatch):
    """Resumed at 15, source_finetune (0-4) is done: its English dataset is not checked (its
    files may be gone), cross_lingual's and cross_modal's shared one is."""
    work_dir, _ = long_run
    checked = []
    monkeypatch.setattr(SyntheticPairDataset, 'check_media_exist',
                        lambda self: checked.append(list(self.languages)), raising=False)
    train(make_cfg(tmp_path, phases=LONG_PHASES, resume_from=work_dir / 'iter_15.pth'))
    assert checked == [LANGS]


def test_an_lr_mult_of_no_parameter_group_fails_before_the_first_step(tmp_path):
    phases = copy.deepcopy(PHASES)
    phases[2]['lr_mult'] = dict(adapter=0.1)
    _, error = runner_that_fails_before_training(make_cfg(tmp_path, phases=phases))
    assert str(error.value) == (
        "phase cross_modal: lr_mult names ['adapter'], which are no parameter group of the "
        "optimiser; it has ['backbone', 'language_branch.adapters', 'language_branch.embedding', "
        "'losses']")


def test_an_lr_mult_of_a_group_the_phase_does_not_train_is_warned_about(tmp_path):
    """A multiplier on a group left out of the phase's trainable scales nothing: its writer
    meant a rate for weights the run never trained, and nothing said so."""
    idle = dict(PHASES[1], iters=1, lr_mult=dict(backbone=0.1))
    runner, _ = train(make_cfg(tmp_path / 'idle', phases=[idle]))
    assert (f"phase cross_lingual: lr_mult scales the groups ['backbone'], whose parameters "
            f"the phase does not train (trainable={PHASES[1]['trainable']}), so it changes "
            'nothing') in log_text(Path(runner.work_dir))
    trained = dict(idle, lr_mult={'language_branch.embedding': 0.5})
    runner, _ = train(make_cfg(tmp_path / 'trained', phases=[trained]))
    assert 'so it changes nothing' not in log_text(Path(runner.work_dir))


# ------------------------------------------------------------------ item 10: data languages
def test_a_val_language_without_adapters_fails_before_the_first_step(tmp_path):
    cfg = make_cfg(tmp_path)
    cfg.val_dataloader = dict(
        batch_size=8, num_workers=0, sampler=dict(type='DefaultSampler', shuffle=False),
        collate_fn=dict(type='xmr.retrieval_collate'),
        dataset=dict(type='SyntheticRetrievalDataset', num_scenes=8, languages=['en', 'de', 'fr'],
                     split='val', image_size=32, seed=0))
    cfg.val_cfg = dict(type='ValLoop')
    cfg.val_evaluator = dict(type='RetrievalMetric', languages=['en', 'de', 'fr'])
    _, error = runner_that_fails_before_training(cfg)
    assert str(error.value) == ("val dataset 0 (SyntheticRetrievalDataset): the model has no "
                                "adapters for ['fr']; it reads ['en', 'de', 'zh']")


def test_a_phase_language_without_adapters_fails_before_the_first_step(tmp_path):
    phases = copy.deepcopy(PHASES)
    phases[1]['dataloader'] = loader(dict(PAIRS, languages=['de', 'fr']))
    _, error = runner_that_fails_before_training(make_cfg(tmp_path, phases=phases))
    assert str(error.value) == ("phase cross_lingual dataset (cross_lingual): the model has no "
                                "adapters for ['fr']; it reads ['en', 'de', 'zh']")


def test_a_phase_language_without_adapters_names_the_config_key_of_its_loader(tmp_path):
    """The phase's name stands for a loader written inside the phase only: a loader named by its
    key (resolved to its config as the loop is built) is named by that key."""
    phases = copy.deepcopy(PHASES)
    phases[1]['dataloader'] = 'fr_dataloader'
    cfg = make_cfg(tmp_path, phases=phases)
    cfg.fr_dataloader = loader(dict(PAIRS, languages=['de', 'fr']))
    _, error = runner_that_fails_before_training(cfg)
    assert str(error.value) == ("phase cross_lingual dataset (fr_dataloader): the model has no "
                                "adapters for ['fr']; it reads ['en', 'de', 'zh']")


def test_a_model_language_no_phase_trains_is_warned_about_before_the_first_step(tmp_path):
    """Modules of a language the phases' data lacks stay as initialised: the run said nothing,
    the checkpoint held them, and encode_texts(lang) answered with untrained ones. An English
    source finetune before (the demo's) hides nothing."""
    cfg = make_cfg(tmp_path, phases=[dict(PHASES[0], iters=1), dict(PHASES[1], iters=1)])
    cfg.model.language_branch.languages = [*cfg.model.language_branch.languages, 'fr']
    runner, _ = train(cfg)
    logged = (Path(runner.log_dir) / f'{runner.timestamp}.log').read_text()
    assert ("the model has modules for ['fr'], which no phase's data holds (phase "
            'source_finetune dataset (source_finetune), phase cross_lingual dataset '
            '(train_dataloader)): no step trains them') in logged
    plain = make_cfg(tmp_path / 'plain', phases=[dict(PHASES[1], iters=1)])
    runner, _ = train(plain)
    assert 'no step trains them' not in (Path(runner.log_dir) /
                                         f'{runner.timestamp}.log').read_text()


def test_a_phase_running_a_learnt_temperature_it_does_not_train_is_warned_about(tmp_path):
    """The default source_cm learns its temperature, but only a phase that lists
    'losses.source_cm' trains it: a source finetune that trained only the backbone scored at
    the initial 0.07 throughout, which the run never said."""
    frozen_scale = dict(PHASES[0], iters=1, trainable=['backbone'])
    runner, _ = train(make_cfg(tmp_path / 'frozen', phases=[frozen_scale]))
    assert ("phase source_finetune: runs the loss 'source_cm' but does not train its learnt "
            "parameters ['losses.source_cm.log_scale'], which stay at their initial values; "
            "add 'losses.source_cm' to the phase's trainable") in log_text(Path(runner.work_dir))
    assert float(runner.model.losses.source_cm.log_scale) == pytest.approx(math.log(1 / 0.07))
    runner, _ = train(make_cfg(tmp_path / 'trained', phases=[dict(PHASES[0], iters=1)]))
    assert 'learnt parameters' not in log_text(Path(runner.work_dir))


# ------------------------------------------------------------------ item 11: divergence
def test_a_huge_lr_stops_at_the_first_nan_and_keeps_the_last_finite_checkpoint(tmp_path):
    phases = copy.deepcopy(PHASES[1:])
    phases[0].update(lr=1e6, warmup_ratio=0.0, schedule='constant')
    cfg = make_cfg(tmp_path, phases=phases, checkpoint_interval=1)
    cfg.optim_wrapper.clip_grad = None
    with pytest.raises(TrainingDivergedError, match=re.escape(
            'phase cross_lingual: the loss is non-finite at iteration 2 (loss_cl=nan), 1 '
            'iteration(s) in a row (nonfinite_patience=0)')) as error:
        train(cfg)
    assert str(error.value).endswith(DivergenceMonitor.WAYS_ON)
    assert sorted(p.name for p in tmp_path.glob('*.pth')) == ['iter_1.pth']
    # The advice holds: the phase had begun at iteration 1, so a lower lr cannot resume there.
    phases[0].update(lr=1e-3)
    with pytest.raises(ValueError, match='cannot resume at iteration 1: the checkpoint was '):
        train(make_cfg(tmp_path, phases=phases, resume_from=tmp_path / 'iter_1.pth'))
    assert (tmp_path / 'last_checkpoint').read_text().endswith('iter_1.pth')
    checkpoint = torch.load(tmp_path / 'iter_1.pth', map_location='cpu', weights_only=True)
    assert all(torch.isfinite(v).all() for v in checkpoint['state_dict'].values()
               if v.is_floating_point())


class PoisonedIteration(Hook):
    """Makes iteration ``at``'s cross-lingual loss NaN (its weight) and keeps the trained
    weights as they are before it and before the next."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.weights: list[dict[str, torch.Tensor]] = []

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        model = runner.model
        if batch_idx in (self.at, self.at + 1):
            self.weights.append({name: p.detach().clone() for name, p in
                                 model.named_parameters() if p.requires_grad})
            model.loss_weights['cl'] = math.nan if batch_idx == self.at else 1.0


def test_a_tolerated_nan_iteration_leaves_the_weights_as_they_were(tmp_path, monkeypatch):
    """``nonfinite_patience=1``, fp32, the constructor's fused AdamW: the NaN iteration's step
    is skipped on the device, and training goes on from the weights before it. The NaN
    iteration is not validated either (``val_interval=3`` falls on it)."""
    validated = []
    monkeypatch.setattr(loops.PhasedTrainLoop, 'validate',
                        lambda loop: validated.append(loop.iter))
    cfg = make_cfg(tmp_path, phases=[dict(PHASES[1], iters=6)])
    cfg.train_cfg.nonfinite_patience = 1
    cfg.train_cfg.val_interval = 3
    allow_mmengine_checkpoint_types()
    runner = Runner.from_cfg(cfg)
    poison = PoisonedIteration(at=2)
    runner.register_hook(poison)
    runner.train()
    before, after = poison.weights
    assert before and all(torch.equal(after[name], value) for name, value in before.items())
    records = next(h for h in runner.hooks if isinstance(h, RecordingHook)).records
    assert [r['iter'] for r in records if 'losses' in r] == [0, 1, 3, 4, 5]  # 2 reached no hook
    assert all(math.isfinite(r['losses']['loss']) for r in records if 'losses' in r)
    assert all(torch.isfinite(p).all() for p in runner.model.parameters())
    assert validated == [6]  # the phase's end; not 3, the tolerated NaN iteration


def test_a_phase_may_not_end_on_a_tolerated_nan_iteration(tmp_path, monkeypatch):
    """Its end would be validated and saved in that state: the run stops there instead."""
    validated = []
    monkeypatch.setattr(loops.PhasedTrainLoop, 'validate',
                        lambda loop: validated.append(loop.iter))
    cfg = make_cfg(tmp_path, phases=[dict(PHASES[1], iters=3)])
    cfg.train_cfg.nonfinite_patience = 1
    allow_mmengine_checkpoint_types()
    runner = Runner.from_cfg(cfg)
    runner.register_hook(PoisonedIteration(at=2))
    with pytest.raises(TrainingDivergedError, match=re.escape(
            'phase cross_lingual ended with 1 non-finite iteration(s) in a row')):
        runner.train()
    assert validated == []


class PoisonedGradients(Hook):
    """Makes iteration ``at``'s gradients of one trained weight NaN; its loss stays finite."""

    def __init__(self, at: int) -> None:
        self.at = at

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        if batch_idx == self.at:
            weight = next(p for p in runner.model.parameters() if p.requires_grad)
            handle = weight.register_hook(lambda grad: (handle.remove(), grad * math.nan)[1])


@pytest.mark.parametrize('change', [
    dict(clip_grad=None), dict(clip_grad=dict(type='value', clip_value=1.0)),
    dict(clip_grad=dict(max_norm=1.0), optimizer=dict(type='AdamW', lr=1e-3, foreach=True))],
    ids=['no-clip', 'clip-by-value', 'clipped-foreach'])
def test_a_step_that_applied_nan_gradients_stops_the_run_before_a_checkpoint_holds_it(
        tmp_path, change):
    """Where the step skips nothing, NaN gradients with a finite loss reach the weights: the
    run stops there, and the checkpoints (one per iteration) are the finite ones before."""
    cfg = make_cfg(tmp_path, phases=[dict(PHASES[1], iters=4)], checkpoint_interval=1)
    cfg.optim_wrapper.clip_grad = None  # replaced whole, not merged into
    cfg.optim_wrapper.update(change)
    allow_mmengine_checkpoint_types()
    runner = Runner.from_cfg(cfg)
    runner.register_hook(PoisonedGradients(at=2))
    with pytest.raises(TrainingDivergedError, match=re.escape(
            'phase cross_lingual: the gradients are non-finite at iteration 3 (their norm is '
            "nan, the loss finite) and this optimiser's step applied them")) as error:
        runner.train()
    assert str(error.value).endswith(DivergenceMonitor.WAYS_ON)
    assert sorted(p.name for p in tmp_path.glob('*.pth')) == ['iter_1.pth', 'iter_2.pth']
    assert (tmp_path / 'last_checkpoint').read_text().endswith('iter_2.pth')
    for name in ('iter_1.pth', 'iter_2.pth'):
        state = torch.load(tmp_path / name, map_location='cpu', weights_only=True)['state_dict']
        assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())


def test_a_step_skipped_for_nan_gradients_trains_on_and_each_skip_is_said(tmp_path, caplog):
    """The constructor's fused AdamW clipped by norm skips the step: no divergence, and every
    skip has a warning of its own (MMEngine's logger prints a repeated warning once)."""
    cfg = make_cfg(tmp_path, phases=[dict(PHASES[1], iters=5)])
    allow_mmengine_checkpoint_types()
    runner = Runner.from_cfg(cfg)
    for at in (1, 3):
        runner.register_hook(PoisonedGradients(at=at))
    runner.train()
    logged = (Path(runner.log_dir) / f'{runner.timestamp}.log').read_text()
    assert re.findall(r'optimiser step skipped at iteration (\d) \((\d) so far', logged) == [
        ('2', '1'), ('4', '2')]
    assert all(torch.isfinite(p).all() for p in runner.model.parameters())


@pytest.mark.parametrize('change, why', [
    (dict(clip_grad=None), 'no clip'),
    (dict(clip_grad=dict(type='value', clip_value=1.0)), 'clipped by value: no norm'),
    (dict(optimizer=dict(type='AdamW', lr=1e-3, foreach=True)), 'unfused'),
    (dict(optimizer=dict(type='SGD', lr=1e-3, momentum=0.9)), 'SGD, unfused'),
    (dict(compiled_step=dict(backend='eager')), 'compiled: foreach'),
], ids=['no-clip', 'clip-by-value', 'foreach', 'sgd', 'compiled-step'])
def test_patience_is_refused_where_a_nonfinite_step_would_reach_the_weights(tmp_path, change,
                                                                            why):
    cfg = make_cfg(tmp_path)
    cfg.train_cfg.nonfinite_patience = 2
    cfg.optim_wrapper.update(change)
    runner, error = runner_that_fails_before_training(cfg)
    assert str(error.value).startswith(
        'train_cfg.nonfinite_patience=2 tolerates non-finite iterations, but this optimiser\'s '
        'step does not skip one'), why
    assert str(error.value).endswith('else set nonfinite_patience=0')
    assert runner.iter == 0 and not list(tmp_path.glob('*.pth'))


def test_patience_is_taken_where_the_step_is_skipped(tmp_path):
    """The constructor's fused AdamW clipped by norm, and fp16's loss scaler without a clip."""
    for name, change in (('fused', {}), ('fp16', dict(type='AutocastOptimWrapper',
                                                      dtype='float16', clip_grad=None))):
        cfg = make_cfg(tmp_path / name, phases=[dict(PHASES[1], iters=1)])
        cfg.train_cfg.nonfinite_patience = 2
        cfg.optim_wrapper.update(change)
        runner, records = train(cfg)
        assert runner.optim_wrapper.skips_nonfinite_steps and len(records) == 1, name


def test_patience_counts_consecutive_nonfinite_iterations():
    finite, nan = dict(loss=torch.tensor(1.0)), dict(loss=torch.tensor(math.nan),
                                                     loss_cm=torch.tensor(math.inf))
    monitor = DivergenceMonitor(patience=2)
    assert [monitor.check(o, 'cross_modal', i) for i, o in enumerate(
        [finite, nan, nan, finite, nan, nan], start=1)] == [True, False, False, True, False,
                                                             False]
    with pytest.raises(TrainingDivergedError, match=re.escape(
            'phase cross_modal: the loss is non-finite at iteration 7 (loss_cm=inf), 3 '
            'iteration(s) in a row (nonfinite_patience=2)')):
        monitor.check(nan, 'cross_modal', 7)
    with pytest.raises(ValueError, match='nonfinite_patience must be an integer >= 0, got -1'):
        DivergenceMonitor(-1)


def test_fp16_steps_skipped_by_the_loss_scaler_are_not_divergence(tmp_path):
    cfg = make_cfg(tmp_path, phases=[dict(PHASES[1], iters=3)])
    # A scale of 2^40 overflows the fp16 gradients: the scaler skips steps, the loss is finite.
    cfg.optim_wrapper.update(type='AutocastOptimWrapper', dtype='float16',
                             loss_scale=dict(init_scale=2.0 ** 40))
    runner, records = train(cfg)
    assert len(records) == 3
    assert runner.optim_wrapper.scaler.get_scale() < 2.0 ** 40


def test_only_map_style_loaders_batched_by_torch_skip_at_the_sampler():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(10))

    assert can_skip_at_sampler(torch.utils.data.DataLoader(list(range(10)), batch_size=2))
    assert not can_skip_at_sampler(torch.utils.data.DataLoader(Stream(), batch_size=2))
    grouped = torch.utils.data.DataLoader(list(range(10)), batch_sampler=[[0, 5], [1, 6]])
    assert not can_skip_at_sampler(grouped)


def test_skip_at_sampler_drops_whole_batches_of_the_next_pass_only():
    dataloader = torch.utils.data.DataLoader(list(range(10)), batch_size=3)
    skip_at_sampler(dataloader, 2)
    assert [b.tolist() for b in dataloader] == [[6, 7, 8], [9]]
    assert [b.tolist() for b in dataloader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert len(dataloader) == 4


def test_a_pending_skip_leaves_the_loader_length_one_whole_pass():
    dataloader = torch.utils.data.DataLoader(list(range(10)), batch_size=3)
    skip_at_sampler(dataloader, 2)
    assert len(dataloader) == 4


def test_a_batch_sampler_subclass_that_groups_its_own_way_does_not_skip_at_the_sampler():
    class LastBatchFirst(torch.utils.data.BatchSampler):
        def __iter__(self):
            return reversed(list(super().__iter__()))

    # Its first 2 batches are [9], [6, 7, 8]: dropping the first 6 indices would skip others.
    batch_sampler = LastBatchFirst(torch.utils.data.SequentialSampler(range(10)), 3, False)
    assert not can_skip_at_sampler(torch.utils.data.DataLoader(list(range(10)),
                                                               batch_sampler=batch_sampler))


def test_a_later_skip_at_sampler_replaces_the_earlier_one():
    dataloader = torch.utils.data.DataLoader(list(range(10)), batch_size=3)
    skip_at_sampler(dataloader, 2)
    assert [b.tolist() for b in dataloader] == [[6, 7, 8], [9]]
    skip_at_sampler(dataloader, 1)
    assert [b.tolist() for b in dataloader] == [[3, 4, 5], [6, 7, 8], [9]]
    # A skip still pending is replaced, not added to.
    skip_at_sampler(dataloader, 3)
    skip_at_sampler(dataloader, 1)
    assert [b.tolist() for b in dataloader] == [[3, 4, 5], [6, 7, 8], [9]]
    assert [b.tolist() for b in dataloader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


class NumberedPasses:
    """A batch sampler that plans its passes itself (no ``start_at``): pass ``e`` yields the
    one-item batches ``[10e]``, ``[10e + 1]``, ``[10e + 2]``."""

    def __init__(self) -> None:
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        return iter([[10 * self.epoch + batch] for batch in range(3)])

    def __len__(self) -> int:
        return 3


def test_a_phase_resumed_on_a_loader_that_cannot_skip_reads_and_drops_what_came_before():
    """Resumed 4 batches into a phase whose loader cannot skip at the sampler: the 3 batches
    of pass 0 and the first of pass 1 are read and dropped, so the phase goes on with pass 1's
    second batch, as the uninterrupted run did."""
    dataloader = torch.utils.data.DataLoader(list(range(40)), batch_sampler=NumberedPasses())
    assert not can_skip_at_sampler(dataloader)
    warnings = []
    loop = types.SimpleNamespace(_iter=9, runner=types.SimpleNamespace(
        logger=types.SimpleNamespace(warning=warnings.append)))
    iterator = loops.PhasedTrainLoop._resumed_data(
        loop, types.SimpleNamespace(name='cross_lingual'), dataloader, 4)
    assert [next(iterator).tolist() for _ in range(3)] == [[11], [12], [20]]
    assert warnings == ['phase cross_lingual: resuming at iteration 9: its dataloader batches '
                        'with NumberedPasses, whose batches cannot be skipped without drawing '
                        'them; reading and dropping 4 batches']


def test_an_error_ending_the_workers_of_a_failed_run_leaves_the_run_s_error_raised(
        tmp_path, monkeypatch):
    """The disk fills during an iteration, then ending the persistent loader workers fails too:
    the run raises the full disk, with the second error logged and noted on it."""
    runner = Runner.from_cfg(make_cfg(tmp_path))

    def disk_full(data_batch) -> None:
        raise OSError(28, 'No space left on device')

    def workers_stuck() -> None:
        raise RuntimeError('DataLoader worker (pid 4321) did not exit')

    monkeypatch.setattr(runner.train_loop, 'run_iter', disk_full)
    monkeypatch.setattr(loops, 'end_persistent_workers', workers_stuck)
    with pytest.raises(OSError, match='No space left on device') as raised:
        runner.train()
    assert raised.value.__notes__ == [
        'while handling it, end_persistent_workers raised RuntimeError: DataLoader worker '
        '(pid 4321) did not exit (logged with its traceback)']
    assert 'in workers_stuck' in log_text(tmp_path)


# ------------------------------------------------------------------ unreadable media
@pytest.mark.slow
@pytest.mark.parametrize('image_format', ['JPEG', 'PNG'])
def test_an_image_cut_short_is_met_at_its_batch_under_each_policy_and_a_resume_meets_it_again(
        tmp_path, image_format):
    """12 images at batch 4, 7 iterations: passes 0 (iterations 0-2) and 1 (3-5) each read the
    image cut in half once. 'raise' stops at the first batch holding it, naming it, with the
    checkpoints before kept; 'skip' trains on 3 items there, and a run resumed from iteration 2
    skips it where the uninterrupted run did and ends on the same weights."""
    dataset = augmented_images(tmp_path)
    cut = tmp_path / '5.png'  # the annotation's name; the bytes are image_format's
    buffer = io.BytesIO()
    Image.open(cut).save(buffer, image_format)
    cut.write_bytes(buffer.getvalue()[:len(buffer.getvalue()) // 2])

    def cfg(work_dir: Path, on_corrupt: str, **options) -> Config:
        cfg = make_cfg(work_dir, phases=[dict(PHASES[0], iters=7, dataloader=None)],
                       checkpoint_interval=2, **options)
        cfg.train_dataloader = loader(dict(dataset, on_corrupt=on_corrupt), batch_size=4)
        return cfg

    with pytest.warns(MediaSkippedWarning, match=re.escape(f'{cut}: not a decodable image')):
        runner, whole = train(cfg(tmp_path / 'whole', 'skip'))
    sizes = [record['batch_size'] for record in whole]
    assert sorted(sizes[:3]) == sorted(sizes[3:6]) == [3, 4, 4] and sizes[6] in (3, 4)
    first = sizes.index(3)
    with pytest.raises(MediaReadError, match=re.escape(f'{cut}: not a decodable image')):
        train(cfg(tmp_path / 'raised', 'raise'))
    assert sorted(p.name for p in (tmp_path / 'raised').glob('*.pth')) == [
        f'iter_{i}.pth' for i in range(2, first + 1, 2)]
    assert list((tmp_path / 'raised').glob('*/*.log'))
    with pytest.warns(MediaSkippedWarning):
        resumed_runner, resumed = train(cfg(tmp_path / 'resumed', 'skip',
                                            resume_from=tmp_path / 'whole' / 'iter_2.pth'))
    assert [record['batch_size'] for record in resumed] == sizes[2:]
    weights = runner.model.state_dict()
    assert [key for key, value in resumed_runner.model.state_dict().items()
            if not torch.equal(value, weights[key])] == []


def test_an_mmengine_param_scheduler_is_refused_not_overwritten(tmp_path):
    """The loop sets every iteration's learning rate: a MultiStepLR ran, unseen in the rates."""
    cfg = make_cfg(tmp_path)
    cfg.param_scheduler = dict(type='MultiStepLR', milestones=[1], gamma=0.01)
    with pytest.raises(ValueError, match=r"^param_scheduler=\{'type': 'MultiStepLR', .*give "
                                         r'param_scheduler = None and schedule in '
                                         r'train_cfg.phases \(lr, schedule'):
        train(cfg)


@pytest.mark.parametrize('paramwise, message', [
    (dict(bias_decay_mult=0.0), r"^phase source_finetune: the optimiser holds no \d+ of the "
                                r"parameters it trains \(\['backbone\."),
    (dict(custom_keys={'losses': dict(lr_mult=10.0)}),
     r'^the optimiser groups start at rates \[0.001, 0.01\], which the loop replaces at the '
     r"first step with each phase's lr"),
])
def test_an_optimiser_the_loop_would_silently_override_is_refused(tmp_path, paramwise, message):
    """MMEngine's default constructor leaves out the parameters frozen at build (the backbone
    trained nothing in its phase) and applies paramwise lr_mult as starting rates (dropped at
    the first step)."""
    cfg = make_cfg(tmp_path, phases=PHASES[:1])
    cfg.optim_wrapper = dict(type='OptimWrapper',
                             optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.1),
                             paramwise_cfg=paramwise)
    with pytest.raises(ValueError, match=message + ".*constructor='PhasedOptimWrapperConstructor'"):
        train(cfg)
