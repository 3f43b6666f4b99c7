"""Retrievers: the MMEngine models that train and evaluate, all on one base."""
from xmr.models.retrievers.base import BaseRetriever
from xmr.models.retrievers.cross_lingual import CrossLingualRetriever
from xmr.models.retrievers.dual_encoder import DualEncoderRetriever
from xmr.models.retrievers.translation import TranslationAlignmentRetriever

__all__ = ['BaseRetriever', 'CrossLingualRetriever', 'DualEncoderRetriever',
           'TranslationAlignmentRetriever']
