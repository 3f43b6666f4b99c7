"""CDDS: constrained decoupling and distribution sampling of patch and word embeddings.

``unet`` decouples one modality's tokens, ``correlation`` finds related feature columns across
modalities, ``sampling`` builds the x-semantic components, ``disentangler`` puts them together
with the losses of ``xmr.models.losses.cdds``. See ``docs/methods/cdds.md``.
"""
from xmr.models.disentanglers.cdds.correlation import (
    CORRELATION_MODES,
    WEIGHTINGS,
    CDDSColumnCorrelation,
    CorrelationWeights,
    column_statistics,
    gaussian_from_statistics,
    masked_correlation,
    soft_threshold,
    symmetric_gaussian_kl,
)
from xmr.models.disentanglers.cdds.disentangler import POOLINGS, CDDSDisentangler
from xmr.models.disentanglers.cdds.sampling import CDDSDistributionSampler, quantile_match
from xmr.models.disentanglers.cdds.unet import DualPathUNet, PathDecoder, UNetOutput

__all__ = [
    'CORRELATION_MODES', 'WEIGHTINGS', 'POOLINGS', 'CDDSColumnCorrelation', 'CDDSDisentangler',
    'CDDSDistributionSampler', 'CorrelationWeights', 'DualPathUNet', 'PathDecoder', 'UNetOutput',
    'column_statistics', 'gaussian_from_statistics', 'masked_correlation', 'quantile_match',
    'soft_threshold',
    'symmetric_gaussian_kl',
]
