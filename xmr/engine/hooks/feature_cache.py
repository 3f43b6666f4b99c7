"""Prepares cached validation and test galleries before each evaluation run."""
from __future__ import annotations

from mmengine.hooks import Hook

from xmr.engine.feature_cache.dataset import prepare_feature_caches
from xmr.registry import HOOKS


@HOOKS.register_module()
class FeatureCacheHook(Hook):
    """Prepares cached validation and test galleries before each evaluation run.

    Training phases are prepared by :class:`~xmr.engine.loops.PhasedTrainLoop` itself; add
    this hook when a validation or test dataset is a :class:`CachedFeatureDataset`. A
    validation within a phase that trains the towers (CL-FT's ``source_finetune``) reads the
    gallery under the weights of that moment: give its dataset ``rebuild_if_stale=True`` so
    that each such validation rebuilds it rather than refusing it.
    """

    def before_val(self, runner) -> None:
        prepare_feature_caches(runner.val_loop.dataloader, runner.model, training=False)

    def before_test(self, runner) -> None:
        prepare_feature_caches(runner.test_loop.dataloader, runner.model, training=False)
