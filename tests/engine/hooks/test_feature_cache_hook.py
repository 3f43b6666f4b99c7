"""FeatureCacheHook: a cached validation gallery that training would leave stale is refused
before the first step."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from mmengine.runner import Runner

from tests.engine.test_loops import PHASES, RecordingHook, make_cfg, with_validation
from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
from xmr.engine.feature_cache import CachedFeatureDataset, StaleFeatureCacheError
from xmr.engine.hooks.feature_cache import refuse_galleries_gone_stale
from xmr.engine.phases import Phase


def _cached_validation_cfg(tmp_path, rebuild_if_stale: bool):
    """source_finetune (trains the backbone, 4 iterations) then cross_lingual, validated every
    2 iterations on a cached gallery."""
    cfg = with_validation(make_cfg(tmp_path / 'run', phases=PHASES[:2]))
    cfg.val_dataloader.dataset = dict(type='CachedFeatureDataset',
                                      dataset=cfg.val_dataloader.dataset,
                                      cache_dir=str(tmp_path / 'gallery'),
                                      rebuild_if_stale=rebuild_if_stale)
    cfg.custom_hooks.append(dict(type='FeatureCacheHook'))
    allow_mmengine_checkpoint_types()
    return cfg


def test_a_gallery_a_backbone_phase_would_leave_stale_is_refused_before_the_first_step(
        tmp_path):
    """The first validation (iteration 2) built the gallery under the weights of that moment;
    the next (4) found it stale and refused it, the run two steps in: now none is taken."""
    runner = Runner.from_cfg(_cached_validation_cfg(tmp_path, rebuild_if_stale=False))
    with pytest.raises(StaleFeatureCacheError, match=(
            r'^phase source_finetune trains the backbone \(backbone\.clip\.\S+, \.\.\.\), so the '
            r"validation gallery's feature cache \(.*gallery\) would be stale .* give the "
            r"validation's CachedFeatureDataset rebuild_if_stale=True")):
        runner.train()
    assert next(h for h in runner.hooks if isinstance(h, RecordingHook)).records == []


def test_a_gallery_rebuilt_when_stale_trains_and_validates_through_a_backbone_phase(tmp_path):
    runner = Runner.from_cfg(_cached_validation_cfg(tmp_path, rebuild_if_stale=True))
    runner.train()
    assert runner.iter == 12


def _phases(*trainables: list[str], iters: int = 4, validate_at_start=()) -> list[Phase]:
    phases = []
    for index, trainable in enumerate(trainables):
        phases.append(Phase(name=f'p{index}', lr=1.0, trainable=trainable, loss_weights={'cl': 1.0},
                            iters=iters, start=index * iters,
                            validate_at_start=index in validate_at_start))
    return phases


@pytest.mark.parametrize('val_interval, at_end, validate_at_start, done, refused', [
    (0, True, (), 0, True),  # the phase end's validation
    (2, False, (), 0, True),  # iteration 2, two steps of p0 in
    (0, False, (1,), 0, True),  # p1's validation at its start, after p0's steps
    (0, False, (), 0, False),  # no validation after p0 steps: the gallery stays current
    (0, False, (0,), 0, False),  # p0 validated before its first step alone
    (5, False, (), 0, True),  # iteration 5, in p1, after p0's steps
    (9, False, (), 0, False),  # beyond the run's 8 iterations
    (0, True, (), 4, False),  # resumed past p0: no step of it is to come
    (2, False, (), 3, True),  # resumed in p0: its last step, then the validation at 4
])
def test_only_a_validation_after_a_step_that_trains_the_backbone_refuses_the_gallery(
        val_interval, at_end, validate_at_start, done, refused, tiny_retriever, tmp_path):
    loop = SimpleNamespace(val_interval=val_interval, validate_at_phase_end=at_end)
    phases = _phases(['backbone'], ['language_branch'], validate_at_start=validate_at_start)
    gallery = CachedFeatureDataset(dict(type='SyntheticRetrievalDataset', num_scenes=2,
                                        languages=['en'], split='val', image_size=32),
                                   tmp_path / 'gallery')
    check = lambda: refuse_galleries_gone_stale(loop, phases, done, tiny_retriever,  # noqa: E731
                                                [gallery])
    if refused:
        with pytest.raises(StaleFeatureCacheError, match='^phase p0 trains the backbone'):
            check()
    else:
        check()


def test_a_phase_that_trains_no_backbone_weight_leaves_the_gallery(tiny_retriever, tmp_path):
    loop = SimpleNamespace(val_interval=1, validate_at_phase_end=True)
    gallery = CachedFeatureDataset(dict(type='SyntheticRetrievalDataset', num_scenes=2,
                                        languages=['en'], split='val', image_size=32),
                                   tmp_path / 'gallery')
    refuse_galleries_gone_stale(loop, _phases(['language_branch']), 0, tiny_retriever, [gallery])
