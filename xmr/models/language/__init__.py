"""The target-language side: tokenizers, embedding block, branch."""
from xmr.models.language.branch import TargetLanguageBranch
from xmr.models.language.embedding import TargetEmbedding
from xmr.models.language.tokenizers import (
                                            BaseTokenizer,
                                            HFTokenizer,
                                            OpenCLIPTokenizer,
                                            SentencePieceTokenizer,
                                            TokenBatch,
)
from xmr.models.language.tower_embedding import TowerTokenEmbedding

__all__ = ['TargetLanguageBranch', 'TargetEmbedding', 'BaseTokenizer', 'HFTokenizer',
           'OpenCLIPTokenizer', 'SentencePieceTokenizer', 'TokenBatch', 'TowerTokenEmbedding']
