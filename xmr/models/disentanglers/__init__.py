"""Disentanglers: target embeddings -> condition for the adapters + named losses."""
from xmr.models.disentanglers.base import (
                                           ConditionDisentangler,
                                           TokenDisentangler,
                                           build_disentangler,
)
from xmr.models.disentanglers.cdds import CDDSDisentangler
from xmr.models.disentanglers.discriminator import PairDiscriminator, reverse_gradient
from xmr.models.disentanglers.parameter_generator import ParameterGenerator
from xmr.models.disentanglers.per_language import PerLanguageDisentangler
from xmr.models.disentanglers.semantics import SemanticsDisentangler

__all__ = ['CDDSDisentangler', 'ConditionDisentangler', 'PairDiscriminator', 'ParameterGenerator',
           'PerLanguageDisentangler', 'SemanticsDisentangler', 'TokenDisentangler',
           'build_disentangler', 'reverse_gradient']
