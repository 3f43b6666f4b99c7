"""Models: frozen backbones, the target-language side, adapters, disentanglers, losses."""
from xmr.models import adapters, backbones, disentanglers, language, losses  # noqa: F401
from xmr.models.data_preprocessor import RetrievalDataPreprocessor
from xmr.models.retrievers import (
    BaseRetriever,
    CrossLingualRetriever,
    DualEncoderRetriever,
    TranslationAlignmentRetriever,
)
from xmr.models.translation_data_preprocessor import TranslationDataPreprocessor

__all__ = ['BaseRetriever', 'CrossLingualRetriever', 'DualEncoderRetriever',
           'RetrievalDataPreprocessor', 'TranslationAlignmentRetriever',
           'TranslationDataPreprocessor']
