"""How a tokenizer reads each language's captions: tokens per caption, captions cut, unknowns.

A frozen tower reads a caption through a fixed context (CLIP's 77 tokens, SigLIP's 64): a
vocabulary learned mostly from English splits another script into several times the tokens
(CLIP's BPE reads XTD10's Russian captions in 3.4 times the tokens of their English originals),
so a language's captions can be cut where English ones never are, and a vocabulary that lacks
a script reads it as unknowns. Both lower that language's recall with no error;
:func:`count_caption_tokens` measures them, per language, as the model's tokenizer reads it
(``tools/caption_tokens.py``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from xmr.models.language.tokenizers import BaseTokenizer


class CaptionTokenCounts(NamedTuple):
    """One language's captions as one tokenizer reads them, before any truncation.

    Attributes:
        lang: the captions' language.
        captions: how many were read.
        mean_tokens: tokens per caption, the tokenizer's specials included (what the tower's
            context holds).
        p95_tokens: the 95th percentile of tokens per caption (nearest rank).
        max_tokens: the longest caption's tokens.
        context: the tokenizer's ``max_length``, the tokens a caption keeps.
        cut: captions longer than ``context``, which the tokenizer truncates.
        pieces: tokens without the specials, over all captions.
        unknown: how many of the ``pieces`` are the unknown token; ``None`` for a tokenizer
            without one (byte-level BPE reads every script).
    """

    lang: str
    captions: int
    mean_tokens: float
    p95_tokens: int
    max_tokens: int
    context: int
    cut: int
    pieces: int
    unknown: int | None

    @property
    def cut_share(self) -> float:
        """The share of the captions that are cut, in ``[0, 1]``."""
        return self.cut / self.captions

    @property
    def unknown_share(self) -> float | None:
        """The share of the pieces that are unknown, in ``[0, 1]``; ``None`` without an unknown
        token."""
        return None if self.unknown is None else self.unknown / max(self.pieces, 1)


def count_caption_tokens(tokenizer: BaseTokenizer, captions: Sequence[str], lang: str,
                         text_language: str | None = None) -> CaptionTokenCounts:
    """Count how ``tokenizer`` reads ``captions`` of language ``lang``, as evaluation encodes
    them (:meth:`~xmr.models.language.tokenizers.BaseTokenizer.evaluation_ids`), untruncated;
    ``text_language``: the language they are written in where it is not ``lang`` (the
    back-translations a model queries ``lang`` with), which a tokenizer writing a language
    token codes.

    Raises:
        ValueError: no captions.
    """
    if not captions:
        raise ValueError(f"no '{lang}' captions to count")
    lengths, pieces, unknown = [], 0, 0
    for caption in captions:
        ids = tokenizer.evaluation_ids(caption, text_language or lang)
        lengths.append(len(ids))
        own = ids[tokenizer.start_tokens:len(ids) - tokenizer.end_count(ids)]
        pieces += len(own)
        if tokenizer.unk_id is not None:
            unknown += own.count(tokenizer.unk_id)
    ordered = sorted(lengths)
    return CaptionTokenCounts(
        lang=lang, captions=len(lengths), mean_tokens=sum(lengths) / len(lengths),
        p95_tokens=ordered[math.ceil(0.95 * len(ordered)) - 1], max_tokens=ordered[-1],
        context=tokenizer.max_length, cut=sum(n > tokenizer.max_length for n in lengths),
        pieces=pieces, unknown=None if tokenizer.unk_id is None else unknown)


def caption_token_table(counts: Sequence[CaptionTokenCounts], source: str | None = None) -> str:
    """A Markdown table of ``counts``, a row per language; with ``source`` among them, a column
    of each language's tokens per caption over the source's (parallel captions: how much more
    of the context the same content takes)."""
    base = next((row.mean_tokens for row in counts if row.lang == source), None)
    header = ['language', 'captions', 'tokens per caption', 'p95', 'longest', 'context',
              'cut (%)', 'unknown (%)']
    if base is not None:
        header.insert(3, f'x {source}')
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    for row in counts:
        unknown = '-' if row.unknown_share is None else f'{100 * row.unknown_share:.2f}'
        cells = [row.lang, f'{row.captions:,}', f'{row.mean_tokens:.1f}', str(row.p95_tokens),
                 str(row.max_tokens), str(row.context), f'{100 * row.cut_share:.2f}', unknown]
        if base is not None:
            cells.insert(3, f'{row.mean_tokens / base:.2f}')
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)
