"""Training engine: phased loop, multi-dataset evaluation loops, optimiser constructor, hooks."""
from xmr.engine import hooks  # noqa: F401
from xmr.engine.eval_loops import MultiDatasetTestLoop, MultiDatasetValLoop
from xmr.engine.loops import PhasedTrainLoop, phase_lr_factor
from xmr.engine.optim import PhasedOptimWrapperConstructor

__all__ = ['PhasedTrainLoop', 'PhasedOptimWrapperConstructor', 'phase_lr_factor',
           'MultiDatasetValLoop', 'MultiDatasetTestLoop']
