"""Hooks of xmr's runner."""
from xmr.engine.hooks.cdds_correlation import CDDSCorrelationHook
from xmr.engine.hooks.checkpoint import CheckpointHook
from xmr.engine.hooks.corrupt_media import CorruptMediaHook
from xmr.engine.hooks.early_stopping import EarlyStoppingHook
from xmr.engine.hooks.feature_cache import FeatureCacheHook
from xmr.engine.hooks.phase_report import PhaseReportHook
from xmr.engine.hooks.preemption import PreemptionHook
from xmr.engine.hooks.rng_state import RNGStateHook
from xmr.engine.hooks.weights_only_checkpoint import WeightsOnlyCheckpointHook
from xmr.engine.hooks.work_dir_lock import WorkDirLockHook

__all__ = ['CDDSCorrelationHook', 'CheckpointHook', 'CorruptMediaHook', 'EarlyStoppingHook',
           'FeatureCacheHook', 'PhaseReportHook', 'PreemptionHook', 'RNGStateHook',
           'WeightsOnlyCheckpointHook', 'WorkDirLockHook']
