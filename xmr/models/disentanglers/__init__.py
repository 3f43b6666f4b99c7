"""Disentanglers: target embeddings -> condition for the adapters + named losses."""
from xmr.models.disentanglers.cdds import CDDSDisentangler

__all__ = ['CDDSDisentangler']
