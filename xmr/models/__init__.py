"""Models: frozen backbones, the target-language side, adapters, disentanglers, losses."""
from xmr.models import adapters, backbones, disentanglers, language, losses  # noqa: F401
from xmr.models.data_preprocessor import RetrievalDataPreprocessor
from xmr.models.dual_encoder import DualEncoderRetriever
from xmr.models.retriever import CrossLingualRetriever
from xmr.models.translation_data_preprocessor import TranslationDataPreprocessor
from xmr.models.translation_retriever import TranslationAlignmentRetriever

__all__ = ['CrossLingualRetriever', 'DualEncoderRetriever', 'RetrievalDataPreprocessor',
           'TranslationAlignmentRetriever', 'TranslationDataPreprocessor']
