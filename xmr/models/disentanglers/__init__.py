"""Disentanglers: target embeddings -> condition for the adapters + named losses."""
from xmr.models.disentanglers.cdds import CDDSDisentangler
from xmr.models.disentanglers.discriminator import PairDiscriminator, reverse_gradient
from xmr.models.disentanglers.semantics import SemanticsDisentangler

__all__ = ['CDDSDisentangler', 'PairDiscriminator', 'SemanticsDisentangler', 'reverse_gradient']
