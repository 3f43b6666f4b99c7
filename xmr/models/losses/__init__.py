"""Losses: cross-lingual alignment, contrastive, and method-specific terms."""
from xmr.models.losses.alignment import AlignmentLoss
from xmr.models.losses.contrastive import InfoNCELoss

__all__ = ['AlignmentLoss', 'InfoNCELoss']
