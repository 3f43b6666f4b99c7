"""CCLM's caption cleaning in front of the XLM-R SentencePiece tokenizer."""
from __future__ import annotations

import re

from xmr.models.language.tokenizers import HFTokenizer
from xmr.registry import TOKENIZERS

_PUNCTUATION = re.compile(r"[,.'!?\"()*#:;~]")
_SPACES = re.compile(r'\s{2,}')


def clean_caption(caption: str, max_words: int = 30) -> str:
    """CCLM's ``pre_caption``: lower-case, punctuation to spaces, at most ``max_words`` words.

    ``-`` and ``/`` also become spaces and ``<person>`` becomes ``person``; words are split on
    single spaces after runs of whitespace are collapsed, as in the authors' code.

    Raises:
        ValueError: nothing is left of the caption.
    """
    text = _PUNCTUATION.sub(' ', caption.lower())
    text = text.replace('-', ' ').replace('/', ' ').replace('<person>', 'person')
    text = _SPACES.sub(' ', text).rstrip('\n').strip(' ')
    words = text.split(' ')
    if len(words) > max_words:
        text = ' '.join(words[:max_words])
    if not text:
        raise ValueError(f'caption {caption!r} is empty after CCLM caption cleaning')
    return text


@TOKENIZERS.register_module()
class CCLMTokenizer(HFTokenizer):
    """XLM-R tokenizer fed with CCLM-cleaned captions (``<s> ... </s>``, pad id 1).

    Args:
        name_or_path: hub name or folder of the XLM-R tokenizer (``'xlm-roberta-large'``).
        tokenizer_file: the same tokenizer as a ``tokenizers`` JSON file (offline).
        max_length: tokens kept, specials included (40 in CCLM's retrieval configs).
        max_words: words kept by :func:`clean_caption` (30 in CCLM's retrieval datasets).
        pad_to_multiple_of: padded lengths in steps of this (see
            :class:`~xmr.models.language.tokenizers.BaseTokenizer`).
    """

    def __init__(self, name_or_path: str | None = None, tokenizer_file: str | None = None,
                 max_length: int = 40, max_words: int = 30,
                 pad_to_multiple_of: int | None = None) -> None:
        super().__init__(name_or_path=name_or_path, tokenizer_file=tokenizer_file,
                         max_length=max_length, lowercase=False,
                         pad_to_multiple_of=pad_to_multiple_of)
        self.max_words = max_words

    def encode(self, text: str) -> list[int]:
        return super().encode(clean_caption(text, self.max_words))
