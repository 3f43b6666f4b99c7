"""Prepares cached validation and test galleries before each evaluation run."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mmengine.hooks import Hook

from xmr.engine.feature_cache.dataset import (
    CachedFeatureDataset,
    datasets_of,
    prepare_feature_caches,
)
from xmr.engine.feature_cache.store import StaleFeatureCacheError
from xmr.engine.phases import under_prefix
from xmr.engine.wrappers import unwrap_model
from xmr.registry import HOOKS


@HOOKS.register_module()
class FeatureCacheHook(Hook):
    """Prepares cached validation and test galleries before each evaluation run.

    Training phases are prepared by :class:`~xmr.engine.loops.PhasedTrainLoop` itself; add
    this hook when a validation or test dataset is a :class:`CachedFeatureDataset`. A
    validation within a phase that trains the towers (CL-FT's ``source_finetune``) reads the
    gallery under the weights of that moment: give its dataset ``rebuild_if_stale=True`` so
    that each such validation rebuilds it rather than refusing it. A validation gallery
    without it is refused as training starts where a phase trains the backbone and a
    validation follows one of its steps, instead of at that validation, a phase in.
    """

    def before_train(self, runner) -> None:
        phases = getattr(runner.train_loop, 'phases', None)
        if not phases or runner.val_loop is None:
            return
        fixed = [dataset for _, dataset in datasets_of(runner.val_loop.dataloader)
                 if isinstance(dataset, CachedFeatureDataset) and not dataset.rebuild_if_stale]
        if fixed:
            refuse_galleries_gone_stale(runner.train_loop, phases, runner.iter,
                                        unwrap_model(runner.model), fixed)

    def before_val(self, runner) -> None:
        prepare_feature_caches(runner.val_loop.dataloader, runner.model, training=False)

    def before_test(self, runner) -> None:
        prepare_feature_caches(runner.test_loop.dataloader, runner.model, training=False)


def refuse_galleries_gone_stale(loop: Any, phases: Sequence[Any], done: int, model: Any,
                                galleries: Sequence[CachedFeatureDataset]) -> None:
    """Refuse validation ``galleries`` (``rebuild_if_stale=False``) that a phase still to train
    the backbone would leave stale before a validation: their key holds the backbone's
    weights (:func:`~xmr.engine.feature_cache.backbone_fingerprint`), so that validation
    would refuse them.

    Args:
        loop: the ``PhasedTrainLoop`` (its ``val_interval`` and ``validate_at_phase_end``).
        phases: its phases, in order, ``start`` filled in.
        done: the iterations already trained (a resumed run's).
        model: the unwrapped retriever.
        galleries: the validation's cached datasets that are not rebuilt when stale.

    Raises:
        StaleFeatureCacheError: naming the phase, a backbone weight it trains, the caches and
            the fix.
    """
    backbone = [name for name, _ in model.named_parameters() if under_prefix(name, 'backbone')]
    last = phases[-1].end
    for index, phase in enumerate(phases):
        trained = next((name for name in backbone if phase.trains(name)), None)
        first = max(phase.start, done)  # the phase's steps still to come follow this
        if trained is None or phase.end <= first:
            continue
        # A validation that follows a step of the phase: its end's, the next val_interval's
        # multiple, or a later phase's validate_at_start.
        validated = (loop.validate_at_phase_end
                     or (loop.val_interval and last // loop.val_interval * loop.val_interval
                         > first)
                     or any(later.validate_at_start for later in phases[index + 1:]))
        if validated:
            caches = ', '.join(str(gallery.cache_dir) for gallery in galleries)
            raise StaleFeatureCacheError(
                f'phase {phase.name} trains the backbone ({trained}, ...), so the validation '
                f"gallery's feature cache ({caches}) would be stale at the first validation "
                'after its first step, and refused there: give the validation\'s '
                'CachedFeatureDataset rebuild_if_stale=True (each validation then rebuilds it '
                'under the weights of that moment), or validate on the plain dataset')
