"""CCLM's caption cleaning in front of the XLM-R SentencePiece tokenizer."""
from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from functools import partial

from mmengine.logging import print_log

from xmr.models.language.tokenizers import HFTokenizer, TokenBatch
from xmr.registry import TOKENIZERS

_PUNCTUATION = re.compile(r"[,.'!?\"()*#:;~]")
_SPACES = re.compile(r'\s{2,}')


def clean_caption(caption: str, max_words: int = 30) -> str:
    """CCLM's ``pre_caption``: lower-case, punctuation to spaces, at most ``max_words`` words.

    ``-`` and ``/`` also become spaces and ``<person>`` becomes ``person``; words are split on
    single spaces after runs of whitespace are collapsed, as in the authors' code.

    Returns:
        The cleaned caption, ``''`` when nothing is left of it (a caption of punctuation, as
        XTD10's German ``'?'``): where ``pre_caption`` raises, :class:`CCLMTokenizer` decides.
    """
    text = _PUNCTUATION.sub(' ', caption.lower())
    text = text.replace('-', ' ').replace('/', ' ').replace('<person>', 'person')
    text = _SPACES.sub(' ', text).rstrip('\n').strip(' ')
    words = text.split(' ')
    if len(words) > max_words:
        text = ' '.join(words[:max_words])
    return text


@TOKENIZERS.register_module()
class CCLMTokenizer(HFTokenizer):
    """XLM-R tokenizer fed with CCLM-cleaned captions (``<s> ... </s>``, pad id 1).

    A caption that cleaning empties is refused, as CCLM's ``pre_caption`` refuses it in
    training and evaluation alike; in :meth:`evaluation_batch` it is encoded as the empty text,
    ``<s></s>``, and counted in a log line, so that a protocol still ranks every caption (CCLM's
    code stops there, and on its own benchmarks never meets one).

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
        #: evaluation captions encoded as ``<s></s>`` by this process so far.
        self.emptied = 0

    def encode(self, text: str) -> list[int]:
        """Raises:
            ValueError: nothing is left of ``text`` after :func:`clean_caption`."""
        cleaned = clean_caption(text, self.max_words)
        if not cleaned:
            raise ValueError(f"caption {text!r} is empty after CCLM's caption cleaning "
                             "(punctuation removed), which CCLM's pre_caption refuses too; "
                             'correct or drop it in the annotation file')
        return super().encode(cleaned)

    def evaluation_batch(self, texts: Sequence[str],
                         langs: Sequence[str] | None = None) -> TokenBatch:
        emptied: list[str] = []
        batch = self._batch(texts, langs, partial(self._evaluation_ids, emptied=emptied))
        if emptied:
            # The running count keeps each line distinct: MMEngine drops a repeated warning.
            self.emptied += len(emptied)
            print_log(f"CCLMTokenizer: CCLM's caption cleaning left nothing of {len(emptied)} "
                      f'of the {len(texts)} evaluation captions in a batch '
                      f'({", ".join(emptied)}); each is encoded as the empty text <s></s> and '
                      'ranked, so the protocol keeps its count of captions '
                      f'({self.emptied} so far in this process, tokenizer.emptied)',
                      logger='current', level=logging.WARNING)
        return batch

    def evaluation_ids(self, text: str, lang: str | None) -> list[int]:
        """``text``'s ids, ``<s></s>`` when cleaning empties it."""
        return super().encode(clean_caption(text, self.max_words))

    def _evaluation_ids(self, text: str, lang: str | None, emptied: list[str]) -> list[int]:
        """:meth:`evaluation_ids`, noting in ``emptied`` a caption cleaning empties (cleaned
        once)."""
        cleaned = clean_caption(text, self.max_words)
        if not cleaned:
            emptied.append(f'{text!r} ({lang})' if lang else repr(text))
        return super().encode(cleaned)
