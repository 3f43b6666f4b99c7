"""Losses: cross-lingual alignment, contrastive, and method-specific terms."""
from xmr.models.losses.alignment import AlignmentLoss
from xmr.models.losses.cdds import (
    CDDSDistributionSamplingLoss,
    CDDSInformationIntegrityLoss,
    CDDSModalityConsistencyLoss,
    CDDSSemanticConsistencyLoss,
    CDDSXSemanticReconstructionLoss,
)
from xmr.models.losses.contrastive import InfoNCELoss
from xmr.models.losses.pair import PairLoss
from xmr.models.losses.sigmoid import SigmoidLoss
from xmr.models.losses.translation import TranslationAlignmentLoss
from xmr.models.losses.vse_hinge import VSEHingeLoss

__all__ = [
    'AlignmentLoss', 'InfoNCELoss', 'CDDSDistributionSamplingLoss', 'CDDSInformationIntegrityLoss',
    'CDDSModalityConsistencyLoss', 'CDDSSemanticConsistencyLoss', 'CDDSXSemanticReconstructionLoss',
    'PairLoss', 'SigmoidLoss', 'TranslationAlignmentLoss', 'VSEHingeLoss',
]
