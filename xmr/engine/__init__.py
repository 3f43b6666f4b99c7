"""Training engine: the phased loop, its optimiser constructor and hooks."""
from xmr.engine import hooks  # noqa: F401
from xmr.engine.loops import PhasedTrainLoop, phase_lr_factor
from xmr.engine.optim import PhasedOptimWrapperConstructor

__all__ = ['PhasedTrainLoop', 'PhasedOptimWrapperConstructor', 'phase_lr_factor']
