"""The target-language side: tokenizers, embedding block, branch."""
from xmr.models.language.branch import TargetLanguageBranch
from xmr.models.language.cclm_tokenizer import CCLMTokenizer
from xmr.models.language.embedding import TargetEmbedding
from xmr.models.language.tokenizers import (
                                            BaseTokenizer,
                                            HFTokenizer,
                                            OpenCLIPTokenizer,
                                            SentencePieceTokenizer,
                                            TokenBatch,
)
from xmr.models.language.tower_embedding import TowerTokenEmbedding

__all__ = ['BaseTokenizer', 'CCLMTokenizer', 'HFTokenizer', 'OpenCLIPTokenizer',
           'SentencePieceTokenizer', 'TargetEmbedding', 'TargetLanguageBranch', 'TokenBatch',
           'TowerTokenEmbedding']
