"""Training engine: phased loop, multi-dataset evaluation loops, optimiser constructor, hooks,
mixed precision, feature cache and DDP helpers."""
from xmr.engine import hooks  # noqa: F401
from xmr.engine.amp import AutocastOptimWrapper
from xmr.engine.bert_adam import BertAdam
from xmr.engine.config_text import format_config_text_once
from xmr.engine.eval_loops import MultiDatasetTestLoop, MultiDatasetValLoop
from xmr.engine.feature_cache import CachedFeatureDataset
from xmr.engine.hooks import FeatureCacheHook
from xmr.engine.loops import PhasedTrainLoop
from xmr.engine.optim import HybridOptimizer, PhasedOptimWrapperConstructor
from xmr.engine.optim_wrapper import OptimWrapper
from xmr.engine.phases import phase_lr_factor

format_config_text_once()

__all__ = ['PhasedTrainLoop', 'PhasedOptimWrapperConstructor', 'phase_lr_factor',
           'MultiDatasetValLoop', 'MultiDatasetTestLoop', 'AutocastOptimWrapper',
           'CachedFeatureDataset', 'FeatureCacheHook', 'HybridOptimizer', 'OptimWrapper',
           'BertAdam']
