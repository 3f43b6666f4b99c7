"""PhasedTrainLoop: learning rates, trainable groups, frozen towers and resume, on a tiny runner."""
from __future__ import annotations

import collections
import copy
import itertools
import json
import math
import random
import re
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.logging import MessageHub
from mmengine.runner import Runner
from PIL import Image
from torch.utils.data import Sampler

from tests.conftest import (
    TINY_CLIP,
    assert_same_checkpoint,
    tiny_backbone_cfg,
    tiny_branch_cfg,
    tiny_dasd_cfg,
    tiny_retriever_cfg,
)
from xmr.datasets import Annotation, MediaRecord, dump_annotation
from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
from xmr.engine.divergence import DivergenceMonitor
from xmr.engine.feature_cache import FeatureCache, StaleFeatureCacheError
from xmr.engine.loops import (
    PhasedTrainLoop,
    _phase_header,
    ensure_train_mode,
    frozen_eval_modules,
    read_to_host,
)
from xmr.engine.optim_wrapper import OptimWrapper
from xmr.engine.phases import Phase, phase_lr_factor
from xmr.models.adapters import AdapterPlacement, BaseAdapter
from xmr.registry import ADAPTERS, DATA_SAMPLERS, HOOKS, MODELS

LANGS = ['de', 'zh']


@HOOKS.register_module(force=True)
class RecordingHook(Hook):
    """Records, per iteration, the phase, LRs, trainable prefixes, the losses and the ETA."""

    priority = 'VERY_LOW'

    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after
        self.records: list[dict] = []

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        model = runner.model
        trainable = sorted({name.split('.')[0] for name, p in model.named_parameters()
                            if p.requires_grad})
        self.records.append(dict(
            iter=runner.iter, phase=runner.train_loop.current_phase.name,
            batch_size=data_batch['batch_size'],
            lrs={g['name']: g['lr'] for g in runner.optim_wrapper.optimizer.param_groups},
            trainable=trainable, weights=dict(model.loss_weights),
            # A draw of the process's stream: a resumed run must draw what the uninterrupted
            # one drew at the same iteration.
            draw=float(torch.rand(())),
        ))

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        self.records[-1]['losses'] = {k: float(v.detach()) for k, v in outputs.items()}
        # Adam's step count of each parameter (BertAdam keeps none), copied as it is now and
        # read once training ends: fused AdamW keeps the counts on the device, and a read here
        # would make the iteration wait for it (the GPU tier counts an iteration's waits).
        steps = [state['step'] for state in runner.optim_wrapper.optimizer.state.values()
                 if 'step' in state]
        self.records[-1]['adam_steps'] = [
            step.clone() if isinstance(step, torch.Tensor) else step for step in steps]
        self.records[-1]['eta'] = runner.message_hub.get_info('eta')
        if self.stop_after is not None and runner.iter + 1 >= self.stop_after:
            runner.train_loop.stop_training = True

    def after_train(self, runner) -> None:
        # The most optimiser steps any parameter had taken at each iteration.
        for record in self.records:
            if isinstance(record.get('adam_steps'), list):
                record['adam_steps'] = max(map(int, record['adam_steps']), default=0)


def loader(dataset: dict, batch_size: int = 8) -> dict:
    return dict(batch_size=batch_size, num_workers=0, drop_last=True,
                sampler=dict(type='DefaultSampler', shuffle=True),
                collate_fn=dict(type='xmr.retrieval_collate'), dataset=dataset)


PAIRS = dict(type='SyntheticPairDataset', num_scenes=40, languages=LANGS, split='train',
             image_size=32, seed=0)
ENGLISH = dict(type='SyntheticPairDataset', num_scenes=40, languages=[], split='train',
               image_size=32, seed=0)

PHASES = [
    dict(name='source_finetune', iters=4, lr=1e-3, warmup_ratio=0.5, schedule='constant',
         trainable=['backbone', 'losses.source_cm'], loss_weights=dict(source_cm=1.0),
         dataloader=loader(ENGLISH)),
    dict(name='cross_lingual', iters=8, lr=4e-3, warmup_ratio=0.25, schedule='cosine',
         trainable=['language_branch'], loss_weights=dict(cl=1.0)),
    dict(name='cross_modal', iters=4, lr=2e-4, warmup_ratio=0.0, schedule='linear',
         trainable=['language_branch'], loss_weights=dict(cm=1.0)),
]


# Phases named by length in epochs and dataloaders named by config key. Worked by hand:
# source_finetune: 40 English items at batch 16, drop_last -> 2 batches x 3 epochs = 6 iterations;
# cross_lingual: the runner's train_dataloader, 40 scenes x 2 languages at batch 8 -> 10.
EPOCH_PHASES = [
    dict(PHASES[0], iters=None, epochs=3, dataloader='source_finetune_dataloader'),
    dict(PHASES[1], iters=None, epochs=1),
    dict(PHASES[2], iters=3),
]
EPOCH_BOUNDARIES = [(0, 6), (6, 16), (16, 19)]


RUN_IDS = itertools.count()


def make_cfg(work_dir: Path, phases=PHASES, checkpoint_interval: int = 100,
             resume_from: Path | None = None, stop_after: int | None = None,
             english_drop_last: bool = True) -> Config:
    return Config(dict(
        default_scope='xmr',
        work_dir=str(work_dir),
        # MMEngine reuses the logger of a run started in the same second under the same name,
        # writing its log elsewhere; a name per config keeps each run's log its own (a resumed
        # run's too, which may start in the second its first run started).
        experiment_name=f"{str(work_dir).strip('/').replace('/', '_')}_{next(RUN_IDS)}",
        model=tiny_retriever_cfg(),
        train_dataloader=loader(PAIRS),
        source_finetune_dataloader=dict(loader(ENGLISH, batch_size=16),
                                        drop_last=english_drop_last),
        train_cfg=dict(type='PhasedTrainLoop', phases=copy.deepcopy(phases), val_interval=0),
        optim_wrapper=dict(type='OptimWrapper', constructor='PhasedOptimWrapperConstructor',
                           optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.1),
                           clip_grad=dict(max_norm=1.0)),
        default_hooks=dict(
            checkpoint=dict(type='CheckpointHook', interval=checkpoint_interval, by_epoch=False),
            logger=dict(type='LoggerHook', interval=100)),
        custom_hooks=[dict(type='RNGStateHook'), dict(type='WeightsOnlyCheckpointHook'),
                      dict(type='RecordingHook', stop_after=stop_after)],
        randomness=dict(seed=3),
        log_level='WARNING',
        resume=resume_from is not None,
        load_from=None if resume_from is None else str(resume_from),
    ))


def train(cfg: Config) -> tuple[Runner, list[dict]]:
    return train_runner(Runner.from_cfg(cfg))


def train_runner(runner: Runner) -> tuple[Runner, list[dict]]:
    """Train a built runner; its RecordingHook's records."""
    allow_mmengine_checkpoint_types()
    runner.train()
    recorder = next(h for h in runner.hooks if isinstance(h, RecordingHook))
    return runner, recorder.records


@pytest.mark.parametrize('model_cfg, losses', [
    (tiny_retriever_cfg, "losses {'cl': 1.0} (not run: cm=0, disentangler=1; the model has no "
                         "disentangler for 'disentangler' to scale), trainable"),
    (tiny_dasd_cfg, "losses {'cl': 1.0, 'disentangler': 1.0} (not run: cm=0), trainable")])
def test_a_phase_s_log_header_names_the_losses_the_model_runs(model_cfg, losses):
    """It printed the config's weights: a disentangler's scale on a model without one read as
    a loss the phase trained."""
    model = MODELS.build(model_cfg())
    phase = Phase.from_config(0, dict(name='cross_lingual', iters=4, lr=1e-3,
                                      trainable=['language_branch'],
                                      loss_weights=dict(cl=1.0, cm=0, disentangler=1.0)))
    model.set_phase(phase.name, phase.loss_weights)
    assert losses in _phase_header(phase, model)


def test_lr_factor_worked_by_hand():
    # 10 steps, 20% warm-up = 2 steps: 1/2, 2/2, then decay over the 8 remaining steps.
    assert phase_lr_factor(0, 10, 0.2, 'cosine') == pytest.approx(0.5)
    assert phase_lr_factor(1, 10, 0.2, 'cosine') == pytest.approx(1.0)
    assert phase_lr_factor(2, 10, 0.2, 'cosine') == pytest.approx(1.0)
    assert phase_lr_factor(5, 10, 0.2, 'cosine') == pytest.approx(
        0.5 * (1 + math.cos(math.pi * 3 / 7)))
    assert phase_lr_factor(9, 10, 0.2, 'cosine') == pytest.approx(0.0)
    assert phase_lr_factor(5, 10, 0.2, 'linear') == pytest.approx(1 - 3 / 7)
    assert phase_lr_factor(9, 10, 0.2, 'linear', min_ratio=0.1) == pytest.approx(0.1)
    assert phase_lr_factor(7, 10, 0.2, 'constant') == 1.0
    with pytest.raises(ValueError, match='unknown schedule'):
        phase_lr_factor(0, 10, 0.1, 'step')


@pytest.fixture(scope='module')
def full_run(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp('full')
    torch.manual_seed(0)
    runner, records = train(make_cfg(work_dir, checkpoint_interval=7))
    return work_dir, runner, records


def test_phases_set_learning_rates_losses_and_trainable_groups(full_run):
    _, _, records = full_run
    assert [r['phase'] for r in records] == (
        ['source_finetune'] * 4 + ['cross_lingual'] * 8 + ['cross_modal'] * 4)
    expected_lr = {
        0: 1e-3 * 0.5, 1: 1e-3, 3: 1e-3,                        # constant after 2 warm-up steps
        4: 4e-3 * 0.5, 5: 4e-3, 6: 4e-3,                        # warm-up 2 of 8, cosine start
        8: 4e-3 * 0.5 * (1 + math.cos(math.pi * 2 / 5)), 11: 0.0,
        12: 2e-4, 13: 2e-4 * (1 - 1 / 3), 15: 0.0,              # linear, no warm-up
    }
    for step, lr in expected_lr.items():
        lrs = list(records[step]['lrs'].values())
        assert lrs == pytest.approx([lr] * len(lrs)), step
    assert records[0]['trainable'] == ['backbone', 'losses']
    assert all(r['trainable'] == ['language_branch'] for r in records[4:])
    assert records[0]['weights'] == {'source_cm': 1.0}
    assert set(records[4]['losses']) == {'loss', 'loss_cl'}
    assert set(records[12]['losses']) == {'loss', 'loss_cm'}


def test_each_phase_starts_its_optimiser_state_afresh(full_run):
    """Phases train independently (DASD): Adam's moments and step count restart at each
    phase, also for the branch that trains in both cross_lingual and cross_modal."""
    _, _, records = full_run
    assert [r['adam_steps'] for r in records] == [*range(1, 5), *range(1, 9), *range(1, 5)]


def test_the_recording_hook_reads_no_step_count_during_an_iteration():
    """Fused AdamW keeps its step counts on the device, where each read would make the
    iteration wait for it; the GPU tier counts those waits with this hook registered
    (tests/gpu/test_runs.py). A meta tensor stands in for a count the host cannot read."""
    hook = RecordingHook()
    hook.records = [dict(iter=0)]
    step = torch.tensor(3.0, device='meta')
    runner = types.SimpleNamespace(
        iter=0, message_hub=MessageHub.get_current_instance(),
        optim_wrapper=types.SimpleNamespace(optimizer=types.SimpleNamespace(
            state={'weight': dict(step=step)})))
    hook.after_train_iter(runner, 0, outputs=dict(loss=torch.tensor(1.0)))
    assert hook.records[0]['losses'] == dict(loss=1.0)


def test_the_log_window_drops_losses_of_earlier_phases(full_run):
    _, runner, _ = full_run
    logged = {k for k in runner.message_hub.log_scalars if k.startswith('train/loss')}
    assert logged == {'train/loss', 'train/loss_cm'}
    assert len(runner.message_hub.get_scalar('train/loss').data[0]) == 4  # cross_modal's steps


def test_the_log_window_drops_gradient_norms_of_earlier_phases(full_run):
    """A phase's logged grad_norm averages its own steps' norms, not those of the parameters
    an earlier phase trained (the backbone's, in source_finetune)."""
    _, runner, _ = full_run
    assert len(runner.message_hub.get_scalar('train/grad_norm').data[0]) == 4


def test_towers_stay_bit_identical_while_the_branch_trains(tmp_path):
    torch.manual_seed(0)
    runner = Runner.from_cfg(make_cfg(tmp_path, phases=PHASES[1:]))
    before = {k: v.clone() for k, v in runner.model.state_dict().items()
              if isinstance(v, torch.Tensor)}
    runner.train()
    after = runner.model.state_dict()
    tower = [k for k in before if k.startswith('backbone.')]
    branch = [k for k in before if k.startswith('language_branch.') and 'adapters' in k]
    assert tower and branch
    assert all(torch.equal(before[k], after[k]) for k in tower)
    assert any(not torch.equal(before[k], after[k]) for k in branch)


def test_a_frozen_tower_s_batch_norm_statistics_stay_as_they_were(tmp_path):
    """A ResNet CLIP's image tower (open_clip's ModifiedResNet) normalises by batch statistics
    in training mode and updates its running ones; frozen while cross_modal trains the branch
    on its images, its statistics must stay those it was built (or pretrained) with."""
    cfg = make_cfg(tmp_path, phases=PHASES[2:])
    resnet = dict(TINY_CLIP, vision_cfg=dict(image_size=32, layers=(1, 1, 1, 1), width=16,
                                             head_width=16))
    cfg.model.backbone.model_cfg = resnet
    torch.manual_seed(0)
    runner = Runner.from_cfg(cfg)
    norms = [k for k, v in runner.model.state_dict().items() if k.endswith('running_mean')]
    before = {k: v.clone() for k, v in runner.model.state_dict().items()}
    runner.train()
    after = runner.model.state_dict()
    assert norms and all(k.startswith('backbone.') for k in norms)
    assert [k for k in before if not torch.equal(before[k], after[k])
            and k.startswith('backbone.')] == []


def test_a_batch_norm_stays_frozen_unless_it_or_one_of_its_parameters_trains():
    """A trainable prefix may name a batch norm's module, a module above it, or one of its
    parameters (its affine weight); prefixes match whole dotted names."""
    model = torch.nn.Sequential(collections.OrderedDict(
        tower=torch.nn.Sequential(collections.OrderedDict(norm=torch.nn.BatchNorm1d(2))),
        head=torch.nn.BatchNorm1d(2)))
    tower_norm, head = model.tower.norm, model.head
    assert frozen_eval_modules(model, []) == [tower_norm, head]
    assert frozen_eval_modules(model, ['tower']) == [head]
    assert frozen_eval_modules(model, ['tower.norm']) == [head]
    assert frozen_eval_modules(model, ['tower.norm.weight']) == [head]
    assert frozen_eval_modules(model, ['tow', 'hea']) == [tower_norm, head]


def test_a_frozen_batch_norm_a_hook_put_in_training_mode_goes_back_to_eval_mode():
    """CDDSCorrelationHook's pass ends with model.train(): every module trains again, the
    frozen batch norms too, which the next iteration must put back in eval mode."""
    model = torch.nn.Sequential(collections.OrderedDict(
        tower=torch.nn.Sequential(collections.OrderedDict(norm=torch.nn.BatchNorm1d(2))),
        head=torch.nn.Linear(2, 2)))
    frozen = frozen_eval_modules(model, ['head'])
    modules = ensure_train_mode(model, None, frozen)
    assert (model.head.training, model.tower.norm.training) == (True, False)
    model.train()
    ensure_train_mode(model, modules, frozen)
    assert (model.head.training, model.tower.norm.training) == (True, False)


@HOOKS.register_module(force=True)
class TrainsEveryModule(Hook):
    """What CDDSCorrelationHook's refresh does to the modes before an iteration."""

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        runner.model.train()


def test_a_hook_that_trains_every_module_leaves_the_frozen_backbone_frozen_for_that_step(
        tmp_path, monkeypatch):
    """The modes were set before the hooks ran: the step after such a hook ran the frozen
    backbone in training mode (its batch norms' statistics moving, its dropout on)."""
    from xmr.models.retrievers.cross_lingual import CrossLingualRetriever

    modes = []
    train_step = CrossLingualRetriever.train_step

    def recorded(model, *args, **kwargs):
        modes.append(model.backbone.training)
        return train_step(model, *args, **kwargs)

    monkeypatch.setattr(CrossLingualRetriever, 'train_step', recorded)
    cfg = make_cfg(tmp_path, phases=PHASES[1:])
    cfg.custom_hooks.append(dict(type='TrainsEveryModule'))
    train(cfg)
    assert modes == [False] * 12


def test_a_frozen_backbone_runs_as_in_eval_mode_unless_its_phase_trains_it():
    """A backbone of one's own whose tower applies dropout in training mode (a Hugging Face
    tower's attention dropout, open_clip's patch dropout) encodes without it while frozen, as
    the written-out towers do; the rest of the model, and a trained backbone, train."""
    model = torch.nn.Sequential(collections.OrderedDict(
        backbone=torch.nn.Sequential(collections.OrderedDict(visual=torch.nn.Dropout(0.5))),
        losses=torch.nn.Dropout(0.5), head=torch.nn.Linear(2, 2)))
    kept = frozen_eval_modules(model, ['head'])
    assert kept == [model.backbone]  # its eval() covers the modules below it
    ensure_train_mode(model, None, kept)
    assert (model.backbone.training, model.backbone.visual.training) == (False, False)
    assert (model.head.training, model.losses.training) == (True, True)
    ensure_train_mode(model, None, frozen_eval_modules(model, ['backbone', 'head']))
    assert model.backbone.visual.training


def test_checkpoints_load_with_weights_only_torch_load(full_run):
    work_dir, _, _ = full_run
    allow_mmengine_checkpoint_types()
    checkpoint = torch.load(work_dir / 'iter_7.pth', map_location='cpu', weights_only=True)
    assert checkpoint['meta']['iter'] == 7
    assert 'rng_state' in checkpoint


def test_resume_in_the_middle_of_phase_two_repeats_the_uninterrupted_run(full_run, tmp_path):
    full_dir, _, uninterrupted = full_run
    torch.manual_seed(0)
    _, first = train(make_cfg(tmp_path, checkpoint_interval=7, stop_after=7))
    assert len(first) == 7
    torch.manual_seed(123)  # the resumed run must not depend on the process's RNG state
    _, resumed = train(make_cfg(tmp_path, resume_from=tmp_path / 'iter_7.pth'))
    assert [r['iter'] for r in resumed] == list(range(7, 16))
    assert resumed[0]['phase'] == 'cross_lingual'
    for mine, reference in zip(resumed, uninterrupted[7:]):
        assert mine['lrs'] == reference['lrs']
        assert mine['losses'] == reference['losses']
        assert mine['adam_steps'] == reference['adam_steps']
    # The checkpoint's random streams are restored: the draws continue those of iteration 7.
    assert [r['draw'] for r in resumed] == [r['draw'] for r in uninterrupted[7:]]
    assert_same_checkpoint(tmp_path / 'iter_16.pth', full_dir / 'iter_16.pth')


@pytest.mark.parametrize('seed', [8, None])
@pytest.mark.parametrize('diff_rank_seed', [False, True])
def test_a_run_resumed_under_another_seed_reads_the_data_of_its_checkpoint_s_seed(
        full_run, tmp_path, seed, diff_rank_seed):
    """MMEngine builds the loop and its train_dataloader before it resumes: their sampler took
    randomness.seed, not the checkpoint's seed the resumed run trains with. Under
    diff_rank_seed MMEngine's build gave the sampler a random seed of its own, which no resumed
    run repeated (one process: rank 0's streams are the run's)."""
    full_dir, _, uninterrupted = full_run
    cfg = make_cfg(tmp_path, resume_from=full_dir / 'iter_7.pth')
    cfg.randomness = dict(seed=seed, diff_rank_seed=diff_rank_seed)
    _, resumed = train(cfg)
    assert [r['losses'] for r in resumed] == [r['losses'] for r in uninterrupted[7:]]


def test_a_run_resumed_where_a_pass_or_a_phase_begins_draws_what_the_uninterrupted_run_drew(
        tmp_path):
    """source_finetune makes 2 passes of 2 batches (80 English pairs at batch 32): iteration 2
    starts its second pass, 4 starts cross_lingual. There the uninterrupted run starts a
    DataLoader pass, which draws its seed from torch's stream, after the checkpoint's streams
    were saved, and the resumed run starts one before it restores them."""
    phases = copy.deepcopy(PHASES)
    phases[0]['dataloader']['batch_size'] = 32
    torch.manual_seed(0)
    _, uninterrupted = train(make_cfg(tmp_path / 'whole', phases=phases))
    train(make_cfg(tmp_path / 'cut', phases=phases, checkpoint_interval=2, stop_after=4))
    for resumed_at in (2, 4):
        _, resumed = train(make_cfg(tmp_path / f'resumed_at_{resumed_at}', phases=phases,
                                    resume_from=tmp_path / 'cut' / f'iter_{resumed_at}.pth'))
        assert [r['draw'] for r in resumed] == [r['draw'] for r in uninterrupted[resumed_at:]]


def test_a_run_resumed_where_a_persistent_loader_goes_on_draws_what_the_uninterrupted_run_drew(
        tmp_path):
    """cross_lingual and cross_modal read the runner's loader, whose worker persists: the
    uninterrupted run starts it once, at cross_lingual's start (iteration 4), and cross_modal
    (iteration 12) goes on with it; the resumed run starts it there."""
    cfg = make_cfg(tmp_path / 'whole')
    cfg.train_dataloader.update(num_workers=1, persistent_workers=True)
    torch.manual_seed(0)
    _, uninterrupted = train(cfg)
    cut = make_cfg(tmp_path / 'cut', checkpoint_interval=12, stop_after=12)
    cut.train_dataloader = cfg.train_dataloader
    train(cut)
    resumed = make_cfg(tmp_path / 'resumed', resume_from=tmp_path / 'cut' / 'iter_12.pth')
    resumed.train_dataloader = cfg.train_dataloader
    _, resumed = train(resumed)
    assert [r['draw'] for r in resumed] == [r['draw'] for r in uninterrupted[12:]]


def augmented_images(root: Path, count: int = 12) -> dict:
    """A dataset of ``count`` random 40 x 48 images with an English caption each, read with
    random resized crops and flips, written under ``root``."""
    pixels = np.random.default_rng(0).integers(0, 256, (count, 40, 48, 3), dtype=np.uint8)
    for i, image in enumerate(pixels):
        Image.fromarray(image).save(root / f'{i}.png')
    dump_annotation(Annotation(
        dataset='demo', split='train', media_type='image', languages=['en'], source_lang='en',
        items=[MediaRecord(str(i), f'{i}.png', {'en': [f'image {i}']}) for i in range(count)]),
        root / 'ann.json')
    return dict(type='CaptionPairDataset', ann_file=str(root / 'ann.json'), data_root=str(root),
                source_only=True,
                transform=dict(type='MediaTransform', backbone=None, size=32,
                               random_resized_crop=dict(scale=(0.3, 1.0)), hflip_prob=0.5))


@pytest.mark.slow
def test_a_run_on_augmented_media_resumed_mid_pass_with_two_persistent_workers_ends_bit_identical(
        tmp_path):
    """source_finetune trains the image tower on 12 augmented images at batch 4 for 7
    iterations (3 per pass), read by 2 persistent workers. Cut at iteration 4, in pass 1, the
    resumed run's workers start afresh where the uninterrupted run's had loaded 16 items; each
    item's crop and flip follow (seed, epoch, index) alone, so the runs end on the same
    weights, which are also those of a run without workers."""
    dataset = augmented_images(tmp_path)

    def cfg(work_dir: Path, num_workers: int = 2, **options) -> Config:
        phases = [dict(PHASES[0], iters=7, dataloader=None)]
        cfg = make_cfg(work_dir, phases=phases, **options)
        cfg.train_dataloader = dict(loader(dataset, batch_size=4), num_workers=num_workers,
                                    persistent_workers=num_workers > 0)
        return cfg

    uninterrupted = trained_state(cfg(tmp_path / 'whole'))
    trained_state(cfg(tmp_path / 'cut', checkpoint_interval=4, stop_after=4))
    resumed = trained_state(cfg(tmp_path / 'resumed', resume_from=tmp_path / 'cut' / 'iter_4.pth'),
                            seed=123)
    assert [key for key in uninterrupted if not torch.equal(resumed[key], uninterrupted[key])] == []
    alone = trained_state(cfg(tmp_path / 'alone', num_workers=0))
    assert [key for key in uninterrupted if not torch.equal(alone[key], uninterrupted[key])] == []


#: The model kinds the runs above (static adapters) do not hold: ``(model, phases, training
#: data or None for the cross-lingual pairs, optim_wrapper changes)``. Each has random draws of
#: its own (DASD's discriminator, CDDS's noise) or state outside its parameters (VSE++'s count of
#: pairs, which moves to the hardest negatives at iteration 3; fp16's loss scale, which backs
#: off from 2^20 in the first iterations).
DUAL_ENCODER = dict(type='DualEncoderRetriever', backbone=tiny_backbone_cfg(), languages=['en'],
                    train_text='source')
BRANCH_PHASES = [
    dict(name='cross_lingual', iters=4, lr=4e-3, warmup_ratio=0.25, schedule='cosine',
         trainable=['language_branch', 'disentangler'], loss_weights=dict(cl=1.0)),
    dict(name='cross_modal', iters=4, lr=2e-4, schedule='linear',
         trainable=['language_branch', 'disentangler'], loss_weights=dict(cm=1.0)),
]
MODEL_KINDS = {
    'dasd': (tiny_dasd_cfg(), [dict(phase, loss_weights=dict(phase['loss_weights'],
                                                              disentangler=1.0))
                               for phase in BRANCH_PHASES], None, {}),
    'lora': (tiny_retriever_cfg(language_branch=tiny_branch_cfg(adapters=dict(type='LoRA', r=4))),
             [dict(phase, trainable=['language_branch']) for phase in BRANCH_PHASES], None, {}),
    'cdds_fp16': (
        dict(DUAL_ENCODER, disentangler=dict(type='CDDSDisentangler', num_heads=2,
                                             num_perturbations=2)),
        [dict(name='cdds', iters=8, lr=1e-3, schedule='cosine',
              trainable=['backbone', 'disentangler', 'losses'],
              loss_weights=dict(disentangler=1.0, itc=1.0))],
        ENGLISH, dict(type='AutocastOptimWrapper', dtype='float16',
                      loss_scale=dict(init_scale=2.0 ** 20, growth_interval=2))),
    'vsepp': (dict(DUAL_ENCODER, losses=dict(itc=dict(type='VSEHingeLoss',
                                                      hardest_after_pairs=24))),
              [dict(name='vse', iters=8, lr=1e-3, schedule='cosine', trainable=['backbone'],
                    loss_weights=dict(itc=1.0))], ENGLISH, {}),
}


def kind_cfg(kind: str, work_dir: Path, num_workers: int = 0, **options) -> Config:
    model, phases, data, optim_wrapper = MODEL_KINDS[kind]
    cfg = make_cfg(work_dir, phases=phases, **options)
    cfg.model = copy.deepcopy(model)
    if data is not None:
        cfg.train_dataloader = loader(data)
    cfg.train_dataloader.num_workers = num_workers
    cfg.optim_wrapper.update(optim_wrapper)
    return cfg


def trained_state(cfg: Config, seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    runner, _ = train(cfg)
    return runner.model.state_dict()


@pytest.fixture(scope='module')
def uninterrupted_kinds(tmp_path_factory) -> dict[str, dict[str, torch.Tensor]]:
    """Each kind's weights after 8 iterations read without workers, trained on first use."""
    trained = {}

    def weights(kind: str) -> dict[str, torch.Tensor]:
        if kind not in trained:
            trained[kind] = trained_state(kind_cfg(kind, tmp_path_factory.mktemp(kind)))
        return trained[kind]
    return weights


@pytest.mark.slow
@pytest.mark.parametrize('kind', MODEL_KINDS)
def test_each_model_kind_read_by_two_workers_ends_bit_identical(kind, uninterrupted_kinds,
                                                                tmp_path):
    state = trained_state(kind_cfg(kind, tmp_path, num_workers=2))
    expected = uninterrupted_kinds(kind)
    assert [key for key in expected if not torch.equal(state[key], expected[key])] == []


@pytest.mark.slow
@pytest.mark.parametrize('kind', MODEL_KINDS)
def test_each_model_kind_resumed_in_its_middle_ends_bit_identical(kind, uninterrupted_kinds,
                                                                  tmp_path):
    trained_state(kind_cfg(kind, tmp_path, checkpoint_interval=3, stop_after=3))
    # Another seed: the resumed run must draw from the checkpoint's streams alone.
    state = trained_state(kind_cfg(kind, tmp_path, resume_from=tmp_path / 'iter_3.pth'),
                          seed=123)
    expected = uninterrupted_kinds(kind)
    assert [key for key in expected if not torch.equal(state[key], expected[key])] == []


def test_a_phase_resumed_in_its_middle_does_not_validate_again_at_its_start(
        full_run, tmp_path, monkeypatch):
    """``validate_at_start`` belongs to a phase's first iteration; a run resumed at iteration
    7, in cross_lingual's middle, validates at the phase ends only."""
    work_dir, _, _ = full_run
    validated = []
    monkeypatch.setattr(PhasedTrainLoop, 'validate', lambda loop: validated.append(loop.iter))
    phases = copy.deepcopy(PHASES)
    phases[1]['validate_at_start'] = True
    train(make_cfg(tmp_path, phases=phases, resume_from=work_dir / 'iter_7.pth'))
    assert validated == [12, 16]


def test_a_phase_that_begins_at_the_resumed_iteration_may_change_its_schedule(tmp_path):
    """Resumed at iteration 4, where cross_lingual begins: that phase has not begun and
    takes the new config's learning rate."""
    torch.manual_seed(0)
    train(make_cfg(tmp_path, phases=PHASES[:2], checkpoint_interval=4, stop_after=4))
    phases = copy.deepcopy(PHASES[:2])
    phases[1]['lr'] = 8e-3
    _, resumed = train(make_cfg(tmp_path, phases=phases, resume_from=tmp_path / 'iter_4.pth'))
    assert [r['iter'] for r in resumed] == list(range(4, 12))
    lrs = list(resumed[1]['lrs'].values())  # after the warm-up's first step
    assert lrs == pytest.approx([8e-3] * len(lrs))


def test_set_lr_scales_each_named_group_by_its_phase_multiplier():
    """lr x lr_mult[group name] x the schedule's factor; groups without a multiplier (or a
    name) get the phase's rate."""
    groups = [dict(name='backbone', lr=0.0), dict(name='language_branch.adapters', lr=0.0),
              dict(lr=0.0)]
    runner = types.SimpleNamespace(optim_wrapper=types.SimpleNamespace(
        optimizer=types.SimpleNamespace(param_groups=groups)))
    phase = Phase(name='cross_modal', lr=1e-3, trainable=['backbone'], iters=10,
                  loss_weights=dict(cm=1.0), warmup_ratio=0.2, schedule='constant',
                  lr_mult=dict(backbone=0.1), start=3)
    PhasedTrainLoop._set_lr(types.SimpleNamespace(runner=runner, _iter=3), phase)
    # First step of a 2-step warm-up: factor 1/2.
    assert [g['lr'] for g in groups] == pytest.approx([0.5e-4, 0.5e-3, 0.5e-3])


def test_validation_leaves_the_training_streams_as_they_were():
    """A validation that draws random numbers (a sampler, dropout left on) does not shift
    what training draws next, and is recorded as the last validation."""
    hub = MessageHub.get_instance('test_validation_streams')
    runner = types.SimpleNamespace(
        val_loop=types.SimpleNamespace(run=lambda: (torch.rand(5), random.random())),
        message_hub=hub)
    torch.manual_seed(7)
    random.seed(7)
    expected = torch.rand(3), random.random()
    torch.manual_seed(7)
    random.seed(7)
    PhasedTrainLoop.validate(types.SimpleNamespace(
        runner=runner, _iter=9, current_phase=None,
        phase_best=types.SimpleNamespace(record=lambda *args: None)))
    got = torch.rand(3), random.random()
    assert torch.equal(got[0], expected[0]) and got[1] == expected[1]
    assert hub.get_info('last_validation_iter') == 9


def test_a_stopped_run_validates_nothing_after_its_stop_and_its_resumption_makes_it_up(
        tmp_path, monkeypatch):
    """A run stopped (SIGTERM through PreemptionHook) at an iteration that would validate,
    by interval or at the phase's end, exits instead: the scheduler's kill is near and the
    evaluation's workers may be dead already. Its checkpoint does not record that validation
    (``last_validation_iter``), so the resumed run makes it up before training on."""
    from xmr.engine.loops import PhasedTrainLoop

    validated = []
    validate = PhasedTrainLoop.validate

    def recorded(loop):
        validated.append(loop.iter)
        validate(loop)
        # MMEngine logs the message hub's 'val*' infos as validation results: the record of a
        # validation is none of them.
        _, line = loop.runner.log_processor.get_log_after_epoch(
            loop.runner, len(loop.runner.val_dataloader), 'val')
        assert 'mAR: ' in line and 'validat' not in line

    monkeypatch.setattr(PhasedTrainLoop, 'validate', recorded)

    def run(work_dir, phases, validate_at_phase_end=True, **options):
        cfg = make_cfg(work_dir, phases=phases, checkpoint_interval=4, **options)
        cfg.train_cfg.update(val_interval=2, validate_at_phase_end=validate_at_phase_end)
        cfg.val_dataloader = dict(loader(dict(
            type='SyntheticRetrievalDataset', num_scenes=8, languages=['en', *LANGS],
            split='val', image_size=32, seed=0, captions_per_image=1), batch_size=8),
            drop_last=False)
        cfg.val_evaluator = dict(type='RetrievalMetric', languages=['en', *LANGS],
                                 source_language='en')
        cfg.val_cfg = dict(type='ValLoop')
        validated.clear()
        train(cfg)
        return list(validated)

    phase = PHASES[1:2]  # 8 iterations
    assert run(tmp_path / 'whole', phase) == [2, 4, 6, 8]
    assert run(tmp_path / 'cut', phase, stop_after=4) == [2]
    assert run(tmp_path / 'cut', phase, resume_from=tmp_path / 'cut' / 'iter_4.pth') == [4, 6, 8]
    # Resumed from a checkpoint whose validation did finish later (iter_4 of the whole run is
    # written before its validation): validated again, on the same weights.
    assert run(tmp_path / 'again', phase,
               resume_from=tmp_path / 'whole' / 'iter_4.pth') == [4, 6, 8]
    assert run(tmp_path / 'at_end', PHASES[:1], stop_after=4) == [2]  # 4: its last iteration
    assert run(tmp_path / 'at_end', PHASES[:1],
               resume_from=tmp_path / 'at_end' / 'iter_4.pth') == [4]
    # A checkpoint of an earlier xmr records the last validation as 'validated_iter': read as
    # the same (the one at 4 is not made up again), never logged (recorded() checks).
    earlier = torch.load(tmp_path / 'whole' / 'iter_4.pth', weights_only=False)
    info = earlier['message_hub']['runtime_info']
    info['validated_iter'] = info.pop('last_validation_iter') + 2  # as if 4's had finished
    torch.save(earlier, tmp_path / 'earlier_iter_4.pth')
    assert run(tmp_path / 'earlier', phase, resume_from=tmp_path / 'earlier_iter_4.pth') == [6, 8]
    # Without phase-end validations, the interval's validation at the phase's end is owed.
    assert run(tmp_path / 'interval_end', PHASES[:1], validate_at_phase_end=False,
               stop_after=4) == [2]
    assert run(tmp_path / 'interval_end', PHASES[:1], validate_at_phase_end=False,
               resume_from=tmp_path / 'interval_end' / 'iter_4.pth') == [4]


def test_resume_under_another_schedule_for_the_phases_begun_is_refused(tmp_path):
    torch.manual_seed(0)
    train(make_cfg(tmp_path, checkpoint_interval=7, stop_after=7))  # 3 iterations into phase 2
    for change in (dict(lr=8e-3), dict(iters=6)):  # the phase being resumed
        phases = copy.deepcopy(PHASES)
        phases[1].update(change)
        with pytest.raises(ValueError, match=(
                r"cannot resume at iteration 7: the checkpoint was trained with phase 1 = "
                r"\{'name': 'cross_lingual', 'start': 4, 'end': 12, .*this config has "
                r"\{'name': 'cross_lingual'.*Resume with the config that wrote it")):
            train(make_cfg(tmp_path, phases=phases, resume_from=tmp_path / 'iter_7.pth'))
    phases = copy.deepcopy(PHASES)
    phases[0]['iters'] = 6  # phase 2 would begin at 6, not 4: iteration 7 means another thing
    with pytest.raises(ValueError, match='the checkpoint was trained with phase 0'):
        train(make_cfg(tmp_path, phases=phases, resume_from=tmp_path / 'iter_7.pth'))
    phases = copy.deepcopy(PHASES)
    phases[2]['iters'] = 6  # a phase not begun may change: the run is extended
    _, resumed = train(make_cfg(tmp_path, phases=phases, resume_from=tmp_path / 'iter_7.pth'))
    assert [r['iter'] for r in resumed] == list(range(7, 18))


def test_a_phase_resumed_in_its_middle_under_another_batching_is_refused(tmp_path):
    """Resumed 3 batches into cross_lingual at batch 4 instead of 8 (a --cfg-options of the
    first run left out), it skipped items 0-11 of the pass where 0-23 were trained and trained
    the rest of the phase at half the batch, without a word. A phase not begun may change."""
    torch.manual_seed(0)
    train(make_cfg(tmp_path, checkpoint_interval=1, stop_after=7))
    for loader_change in (dict(batch_size=4), dict(dataset=dict(PAIRS, num_scenes=20))):
        cfg = make_cfg(tmp_path, resume_from=tmp_path / 'iter_7.pth')
        cfg.train_dataloader.update(loader_change)
        with pytest.raises(ValueError, match=(
                r"^cannot resume phase cross_lingual at iteration 7: its checkpoint was trained "
                r"on \{'global_batch': 8, 'items': 80, 'batches': 10\}, this config gives "
                r"\{'global_batch': (4|8), 'items': (80|40), 'batches': (20|5)\}, so the 3 batches "
                r"it skips would not be those it trained on")):
            train(cfg)
    cfg = make_cfg(tmp_path, resume_from=tmp_path / 'iter_4.pth')  # where cross_lingual begins
    cfg.train_dataloader.batch_size = 4
    _, resumed = train(cfg)
    assert [r['batch_size'] for r in resumed] == [4] * 12


def test_a_resumed_run_takes_the_config_s_optimiser_settings_where_a_phase_begins_only(
        tmp_path):
    """torch's load of the checkpoint's optimiser replaced the config's weight decay and betas
    with the checkpoint's: a run resumed to train its next phase under new settings trained
    under the old ones, without a word. Inside a phase begun under the old ones it is
    refused, as another schedule is."""
    torch.manual_seed(0)
    train(make_cfg(tmp_path, checkpoint_interval=1, stop_after=7))

    def resumed(iteration):
        cfg = make_cfg(tmp_path, resume_from=tmp_path / f'iter_{iteration}.pth')
        cfg.optim_wrapper.optimizer.update(weight_decay=0.5, betas=(0.8, 0.9))
        return cfg

    with pytest.raises(ValueError, match=(
            r"^cannot resume phase cross_lingual at iteration 7: its checkpoint was trained with "
            r"other optimiser settings than this config gives \(group 'backbone': betas=\(0.9, "
            r"0.999\) in the checkpoint, \(0.8, 0.9\) in the config; .*group 'backbone': "
            r"weight_decay=0.1 in the checkpoint, 0.5 in the config; .*Resume with the config "
            r"that wrote it")):
        train(resumed(7))
    runner, records = train(resumed(4))  # where cross_lingual begins
    assert [r['iter'] for r in records] == list(range(4, 16))
    groups = runner.optim_wrapper.optimizer.param_groups
    assert {(g['weight_decay'], tuple(g['betas'])) for g in groups} == {(0.5, (0.8, 0.9)),
                                                                        (0.0, (0.8, 0.9))}


def test_resume_under_a_schedule_without_a_phase_begun_is_refused(full_run, tmp_path):
    """Resumed at iteration 7 with cross_lingual (begun at 4) dropped, the run would find
    every phase done and end at once, its training cut short without a word."""
    work_dir, _, _ = full_run
    with pytest.raises(ValueError, match=(
            r"cannot resume at iteration 7: the checkpoint was trained with phase 1 = "
            r"\{'name': 'cross_lingual', 'start': 4, .*this config has None")):
        train(make_cfg(tmp_path, phases=PHASES[:1], resume_from=work_dir / 'iter_7.pth'))


def test_unknown_trainable_prefix_fails_at_build(tmp_path):
    phases = copy.deepcopy(PHASES[1:])
    phases[0]['trainable'] = ['language_brunch']
    with pytest.raises(ValueError, match="'language_brunch' matches no parameter of the model "
                                         r"\(did you mean 'language_branch'\?\)"):
        Runner.from_cfg(make_cfg(tmp_path, phases=phases)).train()


def test_a_trainable_prefix_names_whole_modules(tmp_path):
    """'language_branch' trains the parameters under language_branch, not those of a module
    whose name merely begins so; a prefix that ends inside a name matches nothing."""
    runner = Runner.from_cfg(make_cfg(tmp_path, phases=[dict(PHASES[1], iters=1)]))
    runner.model.language_branch_extra = torch.nn.Linear(2, 2)
    _, records = train_runner(runner)
    assert records[0]['trainable'] == ['language_branch']
    phases = [dict(PHASES[1], trainable=['language_bran'])]
    with pytest.raises(ValueError, match="trainable prefix 'language_bran' matches no parameter"):
        loop_of(make_cfg(tmp_path, phases=phases))


@ADAPTERS.register_module(name='TestFixedProjectionAdapter', force=True)
class FixedProjectionAdapter(BaseAdapter):
    """``x + ReLU(x A^T) diag(d)``-shaped residual with ``A`` a frozen random projection
    (VeRA's kind of fixed part) and ``d`` trained."""

    def __init__(self, placement: AdapterPlacement, hidden: int = 4) -> None:
        super().__init__(placement)
        self.A = torch.nn.Parameter(torch.randn(hidden, self.width), requires_grad=False)
        self.d = torch.nn.Parameter(torch.zeros(hidden))
        self.up = torch.nn.Linear(hidden, self.width)

    def forward(self, x: torch.Tensor, ctx) -> torch.Tensor:
        return x + self.up(torch.relu(x @ self.A.T) * self.d)


def test_a_parameter_built_frozen_outside_the_backbone_stays_frozen_in_every_phase(tmp_path):
    """A phase set requires_grad on every parameter under its prefixes, so 'language_branch'
    trained an adapter's fixed projection; the backbone, frozen by freeze(), still trains in
    the phase that names it, and a prefix that names only fixed parameters is refused."""
    cfg = make_cfg(tmp_path)
    cfg.model = tiny_retriever_cfg(language_branch=tiny_branch_cfg(
        adapters=dict(type='TestFixedProjectionAdapter')))
    runner = Runner.from_cfg(cfg)
    fixed = {n: p.detach().clone() for n, p in runner.model.named_parameters()
             if n.endswith('.A')}
    trained = {n: p.detach().clone() for n, p in runner.model.named_parameters()
               if n.endswith('.d') or n == 'backbone.clip.text_projection'}
    assert len(fixed) == 6 and len(trained) == 7  # 2 languages x 3 blocks
    _, records = train_runner(runner)
    assert [r['trainable'] for r in records[::4]] == [['backbone', 'losses']] + \
        [['language_branch']] * 3
    after = dict(runner.model.named_parameters())
    assert all(torch.equal(after[n], v) and not after[n].requires_grad for n, v in fixed.items())
    assert all(not torch.equal(after[n], v) for n, v in trained.items())
    phases = [dict(PHASES[1], trainable=['language_branch.adapters.sets.de.0:block_output.A'])]
    cfg.train_cfg.phases = phases
    with pytest.raises(ValueError, match=r"'language_branch.adapters.sets.de.0:block_output.A' "
                                         'matches no parameter of the model but those its '
                                         r'module built frozen \(requires_grad=False\), which '
                                         'no phase trains'):
        loop_of(cfg)


def test_mmengines_constructor_may_leave_out_what_a_module_built_frozen(tmp_path):
    """The loop refuses an optimiser that holds no parameter a phase trains (MMEngine's
    default constructor leaves out those frozen at build); an adapter's fixed projection is
    none of them, and its phase trains."""
    cfg = make_cfg(tmp_path, phases=PHASES[1:2])
    cfg.model = tiny_retriever_cfg(language_branch=tiny_branch_cfg(
        adapters=dict(type='TestFixedProjectionAdapter')))
    cfg.optim_wrapper = dict(type='OptimWrapper',
                             optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.1),
                             paramwise_cfg=dict(bias_decay_mult=0.0))
    # Its groups have no names, which the recording hook reads.
    cfg.custom_hooks = [h for h in cfg.custom_hooks if h['type'] != 'RecordingHook']
    runner = Runner.from_cfg(cfg)
    scales = {n: p.detach().clone() for n, p in runner.model.named_parameters()
              if n.endswith('.d')}
    allow_mmengine_checkpoint_types()
    runner.train()
    after = dict(runner.model.named_parameters())
    assert scales and all(not torch.equal(after[n], v) for n, v in scales.items())


@HOOKS.register_module(force=True)
class EvalModeHook(Hook):
    """Puts the language branch in eval mode after iteration ``at``; records, before each
    iteration, whether every module outside the backbone is in training mode, and whether the
    backbone is (only while its phase trains it)."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.all_training: list[bool] = []
        self.backbone_training: list[bool] = []

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        backbone = set(runner.model.backbone.modules())
        self.all_training.append(all(m.training for m in runner.model.modules()
                                     if m not in backbone))
        self.backbone_training.append(runner.model.backbone.training)

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        if runner.iter == self.at:
            runner.model.language_branch.eval()


def test_the_model_is_put_in_training_mode_only_when_a_module_left_it(tmp_path, monkeypatch):
    cfg = make_cfg(tmp_path)
    cfg.custom_hooks.append(dict(type='EvalModeHook', at=9))
    runner = Runner.from_cfg(cfg)
    calls = []
    original = runner.model.train
    monkeypatch.setattr(runner.model, 'train', lambda mode=True: calls.append(runner.iter)
                        or original(mode))
    runner.train()
    hook = next(h for h in runner.hooks if isinstance(h, EvalModeHook))
    assert hook.all_training == [True] * 16
    assert hook.backbone_training == [True] * 4 + [False] * 12  # source_finetune trains it
    # At each phase's first iteration (0, 4, 12: a phase changes what trains) and after the
    # hook's eval() at iteration 9; not at the other 12 iterations, as MMEngine's loops do.
    assert calls == [0, 4, 10, 12]


def test_the_losses_and_the_norm_reach_the_host_in_one_copy(monkeypatch):
    outputs = dict(loss=torch.tensor(1.5), loss_cl=torch.tensor([2.25], dtype=torch.bfloat16),
                   steps=torch.tensor(3), embeddings=torch.ones(2, 2))
    copies = []
    cpu = torch.Tensor.cpu
    monkeypatch.setattr(torch.Tensor, 'cpu', lambda tensor: copies.append(tensor.shape)
                        or cpu(tensor))
    host, norm = read_to_host(outputs, torch.tensor(0.75))
    assert copies == [torch.Size([4])]  # the three losses and the norm, stacked
    assert norm.item() == 0.75 and norm.dtype == torch.float32
    for name in ('loss', 'loss_cl', 'steps'):
        assert (host[name].dtype, host[name].shape) == (outputs[name].dtype, outputs[name].shape)
        assert host[name].item() == outputs[name].item()
    assert host['embeddings'] is outputs['embeddings']  # not a logged scalar: left as it is
    assert read_to_host({}, None) == ({}, None)


def test_an_iteration_with_a_nonfinite_loss_logs_no_gradient_norm():
    """A NaN in a logged term whose gradients stay finite (a term the step does not train):
    the iteration reaches no hook, and its norm stays out of the log window as well."""
    weight = torch.nn.Parameter(torch.zeros(2))
    wrapper = OptimWrapper(torch.optim.SGD([weight], lr=1.0), clip_grad=dict(max_norm=1.0))
    hub = wrapper.message_hub = MessageHub.get_instance('test_nonfinite_iteration_norm')
    cl_losses = iter([math.nan, 2.0])

    def train_step(data_batch, optim_wrapper):
        weight.grad = torch.tensor([3.0, 4.0])  # norm 5
        optim_wrapper.step()
        return dict(loss=torch.tensor(1.0), loss_cl=torch.tensor(next(cl_losses)))

    hooks = []
    runner = types.SimpleNamespace(
        model=types.SimpleNamespace(train_step=train_step), optim_wrapper=wrapper,
        call_hook=lambda name, **kwargs: hooks.append(name),
        logger=types.SimpleNamespace(warning=lambda message: None))
    loop = types.SimpleNamespace(runner=runner, divergence=DivergenceMonitor(1), _iter=0,
                                 current_phase=types.SimpleNamespace(name='cross_lingual'),
                                 _trained_modules=[], _frozen_norms=[])
    PhasedTrainLoop.run_iter(loop, {})
    assert hooks == ['before_train_iter'] and loop._iter == 1
    assert 'train/grad_norm' not in hub.log_scalars
    PhasedTrainLoop.run_iter(loop, {})
    assert hooks[1:] == ['before_train_iter', 'after_train_iter']
    assert list(hub.get_scalar('train/grad_norm').data[0]) == pytest.approx([5.0])


def test_a_double_loss_reaches_the_host_exactly():
    """The one copy uses a dtype that holds every value: fp64 when a loss is fp64."""
    value = 1.0 + 2.0 ** -40  # not a float32
    host, norm = read_to_host(dict(loss=torch.tensor(value, dtype=torch.float64)),
                              torch.tensor(0.5))
    assert host['loss'].dtype == torch.float64 and host['loss'].item() == value
    assert norm.item() == 0.5 and norm.dtype == torch.float32


# ------------------------------------------------------------------ epochs and dataloader keys
def loop_of(cfg: Config):
    """The train loop as the runner builds it (phases resolved), without training; its runner
    named anew (a runner of its config's name built in the same second took that one's
    logger)."""
    cfg = copy.deepcopy(cfg)
    cfg.experiment_name = f"{cfg.get('experiment_name', 'run')}_loop_{next(RUN_IDS)}"
    return Runner.from_cfg(cfg).train_loop


def test_epochs_resolve_to_iterations_of_the_built_dataloader(tmp_path):
    loop = loop_of(make_cfg(tmp_path, phases=EPOCH_PHASES))
    assert [(p.start, p.end) for p in loop.phases] == EPOCH_BOUNDARIES
    assert loop.max_iters == 19
    assert loop.phases[0].dataloader['batch_size'] == 16  # the key named the English loader
    # Without drop_last the last, partial batch of 40 = 2 x 16 + 8 counts: 3 per epoch.
    loop = loop_of(make_cfg(tmp_path, phases=EPOCH_PHASES, english_drop_last=False))
    assert [(p.start, p.end) for p in loop.phases] == [(0, 9), (9, 19), (19, 22)]


@pytest.fixture(scope='module')
def epochs_run(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp('epochs')
    torch.manual_seed(0)
    _, records = train(make_cfg(work_dir, phases=EPOCH_PHASES, checkpoint_interval=3))
    return work_dir, records


def test_epoch_phases_train_their_resolved_lengths_on_their_named_loaders(epochs_run):
    _, records = epochs_run
    assert [r['iter'] for r in records] == list(range(19))
    assert [(r['phase'], r['batch_size']) for r in records] == (
        [('source_finetune', 16)] * 6 + [('cross_lingual', 8)] * 10 + [('cross_modal', 8)] * 3)
    # The cosine of cross_lingual spans its 10 resolved iterations: warm-up 2.5 -> 3 steps.
    assert list(records[6]['lrs'].values())[0] == pytest.approx(4e-3 / 3)
    assert list(records[15]['lrs'].values())[0] == pytest.approx(0.0)


@pytest.mark.parametrize('resume_at', [3, 9], ids=['mid-epochs-phase', 'after-epochs-phase'])
def test_resume_around_an_epochs_phase_repeats_the_uninterrupted_run(epochs_run, tmp_path,
                                                                    resume_at):
    work_dir, uninterrupted = epochs_run
    torch.manual_seed(123)
    _, resumed = train(make_cfg(tmp_path, phases=EPOCH_PHASES,
                                resume_from=work_dir / f'iter_{resume_at}.pth'))
    assert [r['iter'] for r in resumed] == list(range(resume_at, 19))
    for mine, reference in zip(resumed, uninterrupted[resume_at:]):
        assert (mine['phase'], mine['batch_size']) == (reference['phase'],
                                                       reference['batch_size'])
        assert (mine['lrs'], mine['losses']) == (reference['lrs'], reference['losses'])
    assert_same_checkpoint(tmp_path / 'iter_19.pth', work_dir / 'iter_19.pth')


def test_an_epochs_phase_resumed_under_another_seed_reads_the_data_of_its_checkpoint_s_seed(
        epochs_run, tmp_path):
    """The loop counts an epochs-phase's loader as it is built, before MMEngine resumes: its
    sampler took randomness.seed, not the checkpoint's."""
    work_dir, uninterrupted = epochs_run
    cfg = make_cfg(tmp_path, phases=EPOCH_PHASES, resume_from=work_dir / 'iter_3.pth')
    cfg.randomness = dict(seed=8)
    _, resumed = train(cfg)
    assert [r['losses'] for r in resumed] == [r['losses'] for r in uninterrupted[3:]]


@DATA_SAMPLERS.register_module(force=True)
class LengthlessSampler(Sampler):
    """Every index in order, a pass of no told length (no ``__len__``)."""

    def __init__(self, dataset, seed: int | None = None) -> None:
        self.dataset = dataset

    def __iter__(self):
        return iter(range(len(self.dataset)))


@pytest.mark.parametrize('phases, key, sampler, fault', [
    (PHASES, 'train_dataloader', 'InfiniteSampler', 'never ends a pass'),
    (EPOCH_PHASES, 'source_finetune_dataloader', 'LengthlessSampler',
     'tells no length of a pass (no __len__)'),
], ids=['infinite', 'lengthless'])
def test_a_loader_whose_passes_have_no_end_is_refused_when_the_loop_is_built(
        tmp_path, phases, key, sampler, fault):
    """MMEngine's InfiniteSampler ended the next phase reading its loader in a bare
    StopIteration, and resumed past one pass on other items; a lengthless one in a TypeError."""
    cfg = make_cfg(tmp_path, phases=phases)
    cfg[key].sampler = dict(type=sampler)
    phase = 'cross_lingual' if key == 'train_dataloader' else 'source_finetune'
    with pytest.raises(ValueError, match=re.escape(
            f'phase {phase}: its dataloader ({key}) samples with {sampler}, which {fault}; '
            'PhasedTrainLoop counts its own iterations and reads its loaders pass by pass: '
            "use sampler=dict(type='DefaultSampler', shuffle=True)")):
        loop_of(cfg)


def test_a_phase_s_own_loader_whose_sampler_never_ends_a_pass_is_refused_before_a_step(
        tmp_path):
    phases = copy.deepcopy(PHASES)
    phases[0]['dataloader']['sampler'] = dict(type='InfiniteSampler')
    runner = Runner.from_cfg(make_cfg(tmp_path, phases=phases))
    with pytest.raises(ValueError, match=re.escape(
            'phase source_finetune: its dataloader (source_finetune) samples with '
            'InfiniteSampler, which never ends a pass')):
        runner.train()
    assert next(h for h in runner.hooks if isinstance(h, RecordingHook)).records == []


def with_validation(cfg: Config, val_interval: int | dict = 2) -> Config:
    """``cfg`` validated every ``val_interval`` on 8 synthetic scenes of every language."""
    cfg.train_cfg.update(val_interval=val_interval)
    cfg.val_dataloader = dict(loader(dict(
        type='SyntheticRetrievalDataset', num_scenes=8, languages=['en', *LANGS], split='val',
        image_size=32, seed=0, captions_per_image=1), batch_size=8), drop_last=False)
    cfg.val_evaluator = dict(type='RetrievalMetric', languages=['en', *LANGS],
                             source_language='en')
    cfg.val_cfg = dict(type='ValLoop')
    return cfg


def epoch_counts_cfg(work_dir: Path, batch_size: int) -> Config:
    """The cross_lingual phase for 2 epochs of the train_dataloader (80 items: 80 / batch_size
    batches each), validated every epoch and checkpointed every half epoch, all in epochs."""
    cfg = with_validation(make_cfg(work_dir, phases=[dict(PHASES[1], iters=None, epochs=2)]),
                          val_interval=dict(epochs=1))
    cfg.train_dataloader.batch_size = batch_size
    cfg.train_cfg.update(validate_at_phase_end=False)
    cfg.default_hooks.checkpoint.interval = dict(epochs=0.5)
    return cfg


@pytest.mark.parametrize('batch_size, epoch, half', [(8, 10, 5), (16, 5, 2), (4, 20, 10)])
def test_counts_in_epochs_resolve_from_the_final_batch_size(tmp_path, batch_size, epoch, half):
    """80 items: 10 batches an epoch at 8, 5 at 16 (half an epoch: 2 whole iterations), 20 at 4."""
    loop = loop_of(epoch_counts_cfg(tmp_path, batch_size))
    assert (loop.max_iters, loop.val_interval) == (2 * epoch, epoch)
    checkpoint = next(h for h in loop.runner.hooks if type(h).__name__ == 'CheckpointHook')
    assert checkpoint.interval == half


@pytest.mark.parametrize('batch_size, validated, saved', [
    (8, [10, 20], [5, 10, 15, 20]), (16, [5, 10], [2, 4, 6, 8, 10])])
def test_a_run_validates_and_saves_on_the_epochs_of_its_batch_size(
        tmp_path, monkeypatch, batch_size, validated, saved):
    calls = []
    validate = PhasedTrainLoop.validate
    monkeypatch.setattr(PhasedTrainLoop, 'validate',
                        lambda loop: calls.append(loop.iter) or validate(loop))
    torch.manual_seed(0)
    train(epoch_counts_cfg(tmp_path, batch_size))
    assert calls == validated
    assert sorted(int(p.stem[5:]) for p in tmp_path.glob('iter_*.pth')) == saved


@pytest.mark.parametrize('lengths, message', [
    (dict(iters=4, epochs=1), 'phase source_finetune: give exactly one of iters and epochs'),
    (dict(iters=None), 'phase source_finetune: give exactly one of iters and epochs'),
    (dict(epochs=1), r'iters=4, epochs=1 \(to give epochs in place of a base config'),
    (dict(iters=None, epochs=0), 'phase source_finetune: epochs must be a positive integer, got 0'),
])
def test_a_phase_needs_exactly_one_positive_length(tmp_path, lengths, message):
    phases = copy.deepcopy(PHASES)
    phases[0].update(lengths)
    with pytest.raises(ValueError, match=message):
        loop_of(make_cfg(tmp_path, phases=phases))


def test_an_unknown_dataloader_key_names_the_phase_and_the_known_keys(tmp_path):
    phases = copy.deepcopy(PHASES)
    phases[1]['dataloader'] = 'text_train_dataloader'
    with pytest.raises(ValueError, match=re.escape(
            "phase cross_lingual: dataloader 'text_train_dataloader' is no dataloader of the "
            "config (did you mean 'train_dataloader'?); the config has "
            "['source_finetune_dataloader', 'train_dataloader']")):
        loop_of(make_cfg(tmp_path, phases=phases))


def test_an_epochs_phase_whose_loader_yields_no_batch_fails_at_build(tmp_path):
    phases = copy.deepcopy(EPOCH_PHASES)
    phases[0]['dataloader'] = loader(dict(ENGLISH, num_scenes=10), batch_size=16)
    with pytest.raises(ValueError, match='phase source_finetune: its dataloader yields no batch'):
        loop_of(make_cfg(tmp_path, phases=phases))


@pytest.mark.parametrize('index, name', [(0, 'source_finetune'), (2, 'cross_modal')])
def test_an_iterations_phase_whose_loader_yields_no_batch_is_refused_before_the_first_step(
        tmp_path, index, name):
    """The epochs phase's message; a later phase's was found only as it began, after the phases
    before it had trained."""
    phases = copy.deepcopy(PHASES)
    phases[index]['dataloader'] = loader(dict(ENGLISH, num_scenes=10), batch_size=16)
    runner = Runner.from_cfg(make_cfg(tmp_path, phases=phases))
    with pytest.raises(ValueError, match=re.escape(
            f'phase {name}: its dataloader yields no batch per epoch (fewer items than '
            'batch_size with drop_last?)')):
        runner.train()
    assert next(h for h in runner.hooks if isinstance(h, RecordingHook)).records == []


# ------------------------------------------------------------------ cached phase features
CACHED_PHASES = [dict(phase, cache_features=phase['name'] != 'source_finetune')
                 for phase in PHASES]


def count_cache_builds(monkeypatch) -> list[str]:
    """Records the folder of every feature cache built from now on."""
    built, original = [], FeatureCache.build.__func__

    def build(cls, path, *args, **kwargs):
        built.append(Path(path).name)
        return original(cls, path, *args, **kwargs)

    monkeypatch.setattr(FeatureCache, 'build', classmethod(build))
    return built


def test_phases_with_cache_features_train_as_the_recomputing_run(full_run, tmp_path,
                                                                 monkeypatch):
    _, _, reference = full_run
    built = count_cache_builds(monkeypatch)
    torch.manual_seed(0)
    _, records = train(make_cfg(tmp_path, phases=CACHED_PHASES))
    # Built once, at cross_lingual's start from the weights source_finetune left; cross_modal
    # reads the same loader with the same frozen towers, so it reuses the cache.
    assert built == ['train_dataloader']
    meta = json.loads((tmp_path / 'feature_cache' / 'train_dataloader' / 'meta.json').read_text())
    assert meta['key']['features'] == ['source', 'media']
    assert [(r['iter'], r['phase']) for r in records] == [(r['iter'], r['phase'])
                                                         for r in reference]
    for mine, expected in zip(records, reference):
        assert mine['losses'] == pytest.approx(expected['losses'], rel=1e-4, abs=1e-6)


def test_a_run_resumed_where_a_cached_phase_begins_draws_what_the_uninterrupted_run_drew(
        tmp_path):
    """The uninterrupted run builds cross_lingual's feature cache as the phase begins, a pass
    of a DataLoader, which draws its seed from torch's stream; the run resumed there, after a
    kill at iteration 6, finds the cache built."""
    torch.manual_seed(0)
    _, uninterrupted = train(make_cfg(tmp_path / 'whole', phases=CACHED_PHASES))
    train(make_cfg(tmp_path / 'cut', phases=CACHED_PHASES, checkpoint_interval=4, stop_after=6))
    _, resumed = train(make_cfg(tmp_path / 'cut', phases=CACHED_PHASES,
                                resume_from=tmp_path / 'cut' / 'iter_4.pth'))
    assert [r['draw'] for r in resumed] == [r['draw'] for r in uninterrupted[4:]]


def test_a_run_owned_cache_is_rebuilt_after_a_phase_that_trains_the_towers(tmp_path,
                                                                           monkeypatch):
    phases = [dict(PHASES[1], iters=3), dict(PHASES[0], iters=3), dict(PHASES[2], iters=3)]
    torch.manual_seed(0)
    _, reference = train(make_cfg(tmp_path / 'recompute', phases=phases))
    built = count_cache_builds(monkeypatch)
    cached = [dict(phase, cache_features=phase['name'] != 'source_finetune')
              for phase in phases]
    torch.manual_seed(0)
    _, records = train(make_cfg(tmp_path / 'cached', phases=cached))
    assert built == ['train_dataloader', 'train_dataloader']
    for mine, expected in zip(records, reference):
        assert mine['losses'] == pytest.approx(expected['losses'], rel=1e-4, abs=1e-6)


def test_a_named_cache_dir_is_refused_when_stale_unless_told_to_rebuild(tmp_path, monkeypatch):
    """A cache_dir outside the run may be shared: another run's weights must not replace it."""
    shared = tmp_path / 'shared_cache'
    phase = dict(PHASES[1], iters=2, cache_features=dict(cache_dir=str(shared)))
    train(make_cfg(tmp_path / 'first', phases=[phase]))
    built_by_first = (shared / 'meta.json').read_bytes()
    other_weights = make_cfg(tmp_path / 'second', phases=[phase])
    other_weights.randomness.seed = 4  # another backbone initialisation
    with pytest.raises(StaleFeatureCacheError) as error:
        train(other_weights)
    message = str(error.value)
    assert message.startswith(f'feature cache {shared} is stale')
    assert '\n  backbone: cache has ' in message
    assert 'rebuild_if_stale=True' in message and 'another cache_dir' in message
    assert (shared / 'meta.json').read_bytes() == built_by_first

    built = count_cache_builds(monkeypatch)
    phase['cache_features']['rebuild_if_stale'] = True
    told = make_cfg(tmp_path / 'third', phases=[phase])
    told.randomness.seed = 4
    train(told)
    assert built == ['shared_cache']
    assert (shared / 'meta.json').read_bytes() != built_by_first


def test_cache_features_on_a_phase_that_trains_the_backbone_fails_at_build(tmp_path,
                                                                          monkeypatch):
    phases = copy.deepcopy(PHASES)
    phases[0]['cache_features'] = dict(dtype='float16')
    with pytest.raises(ValueError, match=re.escape(
            'phase source_finetune: cache_features with a trainable backbone (backbone)')):
        loop_of(make_cfg(tmp_path, phases=phases))
    # Reached through a group of the model's: the check read the names as written, and such a
    # phase was refused only as it started, after the phases before it had trained.
    from xmr.models.retrievers import CrossLingualRetriever

    monkeypatch.setattr(CrossLingualRetriever, 'trainable_groups', lambda self: dict(
        text=['backbone.clip.transformer', 'language_branch']))
    phases = copy.deepcopy(PHASES)
    phases[1].update(trainable=['text'], cache_features=True)
    with pytest.raises(ValueError, match=re.escape(
            'phase cross_lingual: cache_features with a trainable backbone '
            '(backbone.clip.transformer)')):
        loop_of(make_cfg(tmp_path / 'grouped', phases=phases))
    phases[1]['trainable'] = ['language_branch']
    assert loop_of(make_cfg(tmp_path / 'plain', phases=phases)).phases[1].cache_features


def test_cache_features_options_and_a_second_wrapper(tmp_path):
    phases = copy.deepcopy(PHASES[1:])
    phases[0]['cache_features'] = dict(dtype='float16', cache_dir=str(tmp_path / 'mine'))
    loop = loop_of(make_cfg(tmp_path, phases=phases))
    dataset = loop.phases[0].dataloader['dataset']
    assert (dataset['type'], dataset['dtype'], dataset['cache_dir']) == (
        'CachedFeatureDataset', 'float16', str(tmp_path / 'mine'))
    assert dataset['dataset'] == PAIRS
    phases[0]['dataloader'] = loader(dict(type='CachedFeatureDataset', dataset=PAIRS,
                                          cache_dir=str(tmp_path / 'c')))
    with pytest.raises(ValueError, match='is a CachedFeatureDataset already'):
        loop_of(make_cfg(tmp_path, phases=phases))


# --------------------------------------------------------------------- gradient accumulation
# Windows of two iterations counted within each phase: source_finetune's 3 iterations step at
# its 2nd and its 3rd (a window of one), cross_lingual's 5 at its 2nd, 4th and 5th.
ACCUMULATED_PHASES = [dict(PHASES[0], iters=3), dict(PHASES[1], iters=5)]


def accumulating_cfg(work_dir: Path, **kwargs) -> Config:
    cfg = make_cfg(work_dir, phases=ACCUMULATED_PHASES, **kwargs)
    cfg.optim_wrapper.accumulative_counts = 2
    return cfg


@pytest.fixture(scope='module')
def accumulated_run(tmp_path_factory):
    torch.manual_seed(0)
    work_dir = tmp_path_factory.mktemp('accumulated')
    return work_dir, train(accumulating_cfg(work_dir, checkpoint_interval=5))[1]


def test_gradient_accumulation_counts_its_windows_within_each_phase(accumulated_run):
    """Counted over the run, as MMEngine counts, the windows would end at global iterations
    2, 4, 6, 8: source_finetune's last iteration would wait for cross_lingual's first."""
    assert [r['adam_steps'] for r in accumulated_run[1]] == [0, 1, 2, 0, 1, 1, 2, 3]


def test_a_run_resumed_at_a_window_s_end_repeats_the_accumulating_run(accumulated_run,
                                                                       tmp_path):
    """Iteration 5 ends cross_lingual's first window; resumed there, the phase's windows go on
    from its start, not from the run's."""
    _, whole = accumulated_run
    torch.manual_seed(0)
    train(accumulating_cfg(tmp_path, checkpoint_interval=5, stop_after=5))
    runner, resumed = train(accumulating_cfg(tmp_path, resume_from=tmp_path / 'iter_5.pth'))
    assert [r['adam_steps'] for r in resumed] == [r['adam_steps'] for r in whole[5:]]
    assert [r['losses'] for r in resumed] == [r['losses'] for r in whole[5:]]
    # MMEngine counted the run's iteration 5 as inside a window, and said gradients were lost.
    assert lost_window_warnings(runner) == []


def lost_window_warnings(runner: Runner) -> list[str]:
    """The lines of the run's log that say a resumed window lost gradients (MMEngine's, xmr's)."""
    log = Path(runner.log_dir, f'{runner.timestamp}.log').read_text(encoding='utf-8')
    return [line for line in log.splitlines()
            if 'Resumed iteration number' in line or 'accumulation window' in line]


def test_a_run_resumed_inside_a_window_steps_on_the_window_s_gradients(accumulated_run,
                                                                        tmp_path):
    """The checkpoint of iteration 6 (a preemption's save falls anywhere) comes after the
    first of the window 5-6: its gradients travel with the checkpoint, so the step at 6 and
    iteration 7's loss are the uninterrupted run's (a dropped gradient changed the loss by
    5e-4), and so are the final weights and optimiser state."""
    work_dir, whole = accumulated_run
    torch.manual_seed(0)
    train(accumulating_cfg(tmp_path, checkpoint_interval=6, stop_after=6))
    allow_mmengine_checkpoint_types()
    saved = torch.load(tmp_path / 'iter_6.pth', weights_only=True)['optimizer']
    assert len(saved['pending_grads']) == 1  # one rank's
    assert any(grad is not None for grad in saved['pending_grads'][0])
    runner, resumed = train(accumulating_cfg(tmp_path, resume_from=tmp_path / 'iter_6.pth'))
    assert [r['losses'] for r in resumed] == [r['losses'] for r in whole[6:]]
    assert_same_checkpoint(tmp_path / 'iter_8.pth', work_dir / 'iter_8.pth')
    assert 'pending_grads' not in torch.load(work_dir / 'iter_5.pth',
                                             weights_only=True)['optimizer']
    assert lost_window_warnings(runner) == []


def test_a_run_resumed_in_a_phase_s_first_window_is_not_told_adam_restarts(accumulated_run,
                                                                            tmp_path):
    """Iteration 4's checkpoint comes one iteration into cross_lingual, before its first step:
    its optimiser has no state, as the uninterrupted run's had none there."""
    _, whole = accumulated_run
    torch.manual_seed(0)
    train(accumulating_cfg(tmp_path, checkpoint_interval=4, stop_after=4))
    runner, resumed = train(accumulating_cfg(tmp_path, resume_from=tmp_path / 'iter_4.pth'))
    assert [r['losses'] for r in resumed] == [r['losses'] for r in whole[4:]]
    log = Path(runner.log_dir, f'{runner.timestamp}.log').read_text(encoding='utf-8')
    assert 'without optimiser state' not in log


def test_a_run_resumed_inside_a_window_without_its_gradients_says_so(tmp_path):
    """Iteration 6's checkpoint without ``pending_grads`` (as MMEngine's wrappers write it):
    the warning names the phase, where in the window it resumed and what the step sums."""
    torch.manual_seed(0)
    train(accumulating_cfg(tmp_path, checkpoint_interval=6, stop_after=6))
    allow_mmengine_checkpoint_types()
    checkpoint = torch.load(tmp_path / 'iter_6.pth', weights_only=True)
    del checkpoint['optimizer']['pending_grads']
    torch.save(checkpoint, tmp_path / 'without.pth')
    runner, _ = train(accumulating_cfg(tmp_path / 'resumed', resume_from=tmp_path / 'without.pth'))
    [warning] = lost_window_warnings(runner)
    assert warning.endswith(
        'phase cross_lingual: resumed at iteration 6 inside an accumulation window of 2 '
        'iterations (1 done) from a checkpoint without their gradients '
        "(optimizer.pending_grads): the window's step sums the iterations from 7 on alone and "
        "the run departs from the uninterrupted one; xmr's OptimWrapper and CheckpointHook "
        'save them')


def test_a_phase_resumed_in_its_middle_under_another_accumulation_is_refused(tmp_path):
    """Resumed at iteration 6 (cross_lingual's first window done, one of the second) with
    windows of 3, the step at 7 summed iteration 5's gradient (halved) with 6's and 7's
    (divided by 3), and the phase stepped at other iterations than it began to, without a
    word. Where the phase begins, its windows follow the config."""
    torch.manual_seed(0)
    train(accumulating_cfg(tmp_path, checkpoint_interval=3, stop_after=6))

    def resumed(iteration):
        cfg = accumulating_cfg(tmp_path, resume_from=tmp_path / f'iter_{iteration}.pth')
        cfg.optim_wrapper.accumulative_counts = 3
        return cfg

    with pytest.raises(ValueError, match=re.escape(
            'cannot resume phase cross_lingual at iteration 6: its checkpoint was trained with '
            'other optimiser settings than this config gives (accumulative_counts=2 in the '
            'checkpoint, 3 in the config)')):
        train(resumed(6))
    _, records = train(resumed(3))  # where cross_lingual begins: 5 iterations, windows of 3
    assert [r['adam_steps'] for r in records] == [0, 0, 1, 1, 2]


def three_image_loop(folder, split: str, size: int, **metric):
    """An evaluation loop's stand-in: a gallery of three English-captioned images (files
    absent) at ``<folder>/<split>.json``, scored by one ``RetrievalMetric(**metric)``."""
    from types import SimpleNamespace

    from xmr.datasets import Annotation, MediaRecord, RetrievalDataset, dump_annotation
    from xmr.evaluation import RetrievalMetric

    dump_annotation(Annotation(
        dataset='demo', split=split, media_type='image', languages=['en'],
        items=[MediaRecord(name, f'{name}.png', {'en': [f'a {name} dog']})
               for name in ('red', 'blue', 'green')]), folder / f'{split}.json')
    gallery = RetrievalDataset(folder / f'{split}.json', data_root=folder,
                               transform=dict(type='MediaTransform', backbone=None, size=size))
    return SimpleNamespace(dataloader=SimpleNamespace(dataset=gallery),
                           evaluator=SimpleNamespace(metrics=[RetrievalMetric(**metric)]))


def test_a_validation_gallery_of_another_size_than_its_protocol_is_refused_before_training(
        tmp_path):
    """The metric found it at the first validation, a phase in (xtd10_t2i_r10 on the 50
    images of the few-shot val split)."""
    from xmr.engine.data_languages import check_gallery_sizes

    def val_loop(**metric):
        return three_image_loop(tmp_path, 'val', 8, **metric)

    with pytest.raises(ValueError, match=(
            r"^val dataset 0 \(.*val.json\) holds 3 media, but its metric's protocol "
            r"'xtd10_t2i_r10' is defined on 1000: give the metric a protocol for any size "
            r'\(standard\), or gallery_size=3 to score it on this one$')):
        check_gallery_sizes(val_loop(protocol='xtd10_t2i_r10'))
    with pytest.raises(ValueError, match="holds 3 media, but its metric's gallery_size=5:"):
        check_gallery_sizes(val_loop(gallery_size=5))
    check_gallery_sizes(val_loop(protocol='xtd10_t2i_r10', gallery_size=3))
    check_gallery_sizes(val_loop())
