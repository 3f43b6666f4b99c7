"""Retrieval scored from token sets: a model's fine-grained score over every pair, or re-ranking.

Some models do not compare one embedding per item: CDDS (paper §3.5) scores an image–caption pair
by matching the semantic components of its patches and words. Such a model hands the metric each
item's real tokens and its score function ``score(image_tokens, image_mask, text_tokens,
text_mask) -> [B_i, B_t]`` (for CDDS, ``xmr.models.losses.cdds.patch_word_similarity``), and this
module ranks with it:

* ``'tokens'``: exact; every query meets every gallery item, in blocks whose token-pair
  intermediate stays near :data:`TOKEN_PAIR_BUDGET` elements, so memory is bounded whatever the
  gallery;
* ``'tokens_rerank'``: for large galleries; the cosine of the pooled embeddings picks each
  query's ``candidates`` best gallery items, the token score re-orders them. A positive outside
  the candidates gets a lower-bound rank, so only R@K with ``K <= candidates`` is exact (as for an
  approximate index).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from xmr.evaluation.ranking import ranks_from_topk, ties_against_query
from xmr.evaluation.search import blockwise_ranks, default_chunk_size

__all__ = ['TokenScore', 'TokenSet', 'TokenSetWriter', 'TokenScoring', 'TOKEN_SCORING_MODES',
           'TOKEN_PAIR_BUDGET', 'pairwise_token_scores', 'token_ranks']

#: ``score(image_tokens [B_i, P, D], image_mask [B_i, P], text_tokens [B_t, W, D],
#: text_mask [B_t, W]) -> [B_i, B_t]``, higher = more similar.
TokenScore = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
TOKEN_SCORING_MODES = ('tokens', 'tokens_rerank')
#: Elements of one ``[B_i, B_t, W, P]`` token-pair block (2**24 float32 = 64 MiB).
TOKEN_PAIR_BUDGET = 2 ** 24


@dataclass
class TokenSet:
    """Variable-length token sequences, padded: ``tokens [N, L, D]``, ``mask [N, L]`` bool."""

    tokens: Tensor
    mask: Tensor

    @classmethod
    def stack(cls, sequences: Sequence[Tensor], width: int,
              dtype: torch.dtype = torch.float32) -> TokenSet:
        """Pad ``[L_n, D]`` sequences (real tokens only) into one set of ``dtype``."""
        length = max((seq.shape[0] for seq in sequences), default=1)
        tokens = torch.zeros(len(sequences), length, width, dtype=dtype)
        mask = torch.zeros(len(sequences), length, dtype=torch.bool)
        for row, seq in enumerate(sequences):
            tokens[row, :seq.shape[0]] = seq
            mask[row, :seq.shape[0]] = True
        return cls(tokens, mask)

    @classmethod
    def cat(cls, sets: Sequence[TokenSet]) -> TokenSet:
        """The sets' sequences one after the other, padded to the longest."""
        length = max(part.tokens.shape[1] for part in sets)
        return cls(torch.cat([F.pad(part.tokens, (0, 0, 0, length - part.tokens.shape[1]))
                              for part in sets]),
                   torch.cat([F.pad(part.mask, (0, length - part.mask.shape[1]))
                              for part in sets]))

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def to(self, dtype: torch.dtype) -> TokenSet:
        """The set with its tokens in ``dtype`` (itself where they are already)."""
        return self if self.tokens.dtype == dtype else TokenSet(self.tokens.to(dtype), self.mask)

    def select(self, rows: Tensor | slice) -> TokenSet:
        """The chosen sequences, cut to the longest of them (less padding to score)."""
        mask = self.mask[rows]
        length = max(1, int(mask.sum(1).max())) if mask.shape[0] else 1
        return TokenSet(self.tokens[rows][:, :length], mask[:, :length])


class TokenSetWriter:
    """A :class:`TokenSet` of ``rows`` sequences written one at a time into one padded buffer
    of ``dtype``, each converted as it is written: a gallery's tokens are held once. Sequences
    listed and stacked at the end were held twice at the peak (and freed, the list's memory
    stayed the process's). The buffer grows to a longer sequence where one comes (a video
    among images).
    """

    def __init__(self, rows: int, dtype: torch.dtype = torch.float32) -> None:
        self.rows, self.dtype = rows, dtype
        self.tokens: Tensor | None = None
        self.lengths = torch.zeros(rows, dtype=torch.long)

    def __setitem__(self, row: int, sequence: Tensor) -> None:
        """Write the ``[L, D]`` real tokens of ``row``."""
        length = sequence.shape[0]
        if self.tokens is None:
            self.tokens = torch.zeros(self.rows, length, sequence.shape[1], dtype=self.dtype)
        elif length > self.tokens.shape[1]:
            self.tokens = F.pad(self.tokens, (0, 0, 0, length - self.tokens.shape[1]))
        self.tokens[row, :length] = sequence
        self.lengths[row] = length

    def finish(self, rows: Sequence[int]) -> TokenSet:
        """The set of the ``rows`` written (ascending), moved up in place over those left
        unwritten (media that could not be read), then cut to them: copied where some were
        left out, so that the set saved holds no row of theirs (a view is saved with its
        whole storage)."""
        for new, old in enumerate(rows):
            if new != old:
                self.tokens[new] = self.tokens[old]
        tokens = self.tokens[:len(rows)]
        lengths = self.lengths[list(rows)]
        mask = torch.arange(tokens.shape[1])[None] < lengths[:, None]
        return TokenSet(tokens if len(rows) == self.rows else tokens.clone(), mask)


@dataclass(frozen=True)
class TokenScoring:
    """How a language gallery is ranked from token sets.

    Attributes:
        score: the model's :data:`TokenScore`.
        mode: ``'tokens'`` (exact) or ``'tokens_rerank'``.
        candidates: gallery items the pooled cosine shortlists per query (``'tokens_rerank'``).
        device: where the token blocks are scored; ``None`` = CUDA when available (an exact
            COCO 5K test on ViT-B/16 tokens is ~2.5·10^14 multiply-adds), else the CPU.
    """

    score: TokenScore
    mode: str = 'tokens'
    candidates: int = 100
    device: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in TOKEN_SCORING_MODES:
            raise ValueError(f"token scoring mode must be one of {TOKEN_SCORING_MODES}, got "
                             f"'{self.mode}'.")
        if self.candidates < 1:
            raise ValueError(f'rerank candidates must be positive, got {self.candidates}.')

    @property
    def resolved_device(self) -> torch.device:
        """The device the blocks are scored on."""
        return torch.device(self.device or ('cuda' if torch.cuda.is_available() else 'cpu'))


def pairwise_token_scores(score: TokenScore, media: TokenSet, captions: TokenSet,
                          budget: int = TOKEN_PAIR_BUDGET,
                          device: torch.device | str = 'cpu') -> Tensor:
    """Every media × caption score, ``[M, C]`` on the CPU, in square blocks of about ``budget``
    token pairs scored on ``device``, in float32: a gallery stored in float16
    (``MediaIndex(token_dtype=torch.float16)``) is upcast a block at a time, never whole, and
    the score function is given float32 whatever it does with its inputs."""
    if not len(media) or not len(captions):  # an approximate index's empty shortlist
        return torch.zeros(len(media), len(captions))
    pairs_per_item = media.tokens.shape[1] * captions.tokens.shape[1]
    side = max(1, math.isqrt(max(1, budget // pairs_per_item)))
    rows = []
    for m in range(0, len(media), side):
        image = media.select(slice(m, m + side))
        # Moved, then upcast: a float16 block crosses to a GPU in half the bytes.
        image_tokens, image_mask = image.tokens.to(device).float(), image.mask.to(device)
        rows.append(torch.cat([
            score(image_tokens, image_mask, text.tokens.to(device).float(),
                  text.mask.to(device)).cpu()
            for text in (captions.select(slice(c, c + side))
                         for c in range(0, len(captions), side))], dim=1))
    return torch.cat(rows).float()


def token_ranks(scoring: TokenScoring, direction: str, media: TokenSet, captions: TokenSet,
                pooled_media: Tensor, pooled_captions: Tensor, caption_media: Tensor,
                grouped: bool = False) -> Tensor:
    """Ranks of one direction scored by the model's token score.

    Args:
        scoring: the score and the mode.
        direction: ``'t2i'`` (captions query media) or ``'i2t'``.
        media / captions: the gallery's token sets, ``M`` and ``C`` sequences.
        pooled_media / pooled_captions: ``[M, E]`` / ``[C, E]`` L2-normalised embeddings, which
            shortlist the candidates of ``'tokens_rerank'``.
        caption_media: ``[C]`` row of each caption's media.
        grouped: media→text ranked over per-media caption groups (the DASD authors' code);
            ``'tokens_rerank'`` then shortlists ``candidates`` × the largest caption count of a
            media, so that ranks up to ``candidates`` media are exact, as for the other rankings.

    Returns:
        ``[Q]`` int64 ranks, 1-based; with ``'tokens_rerank'`` exact up to ``candidates`` (a
        positive outside the shortlist ranks past it).
    """
    num_media = len(media)
    if direction == 't2i':
        query_group, gallery_group = caption_media, torch.arange(num_media)
    else:
        query_group, gallery_group = torch.arange(num_media), caption_media
    if scoring.mode == 'tokens':
        return blockwise_ranks(
            lambda start, stop: _query_block(scoring, direction, media, captions,
                                             slice(start, stop)),
            query_group, gallery_group, grouped=grouped, num_groups=num_media,
            chunk_size=default_chunk_size(max(len(media), len(captions))))
    queries, gallery = (pooled_captions, pooled_media) if direction == 't2i' else (
        pooled_media, pooled_captions)
    depth = scoring.candidates
    if grouped:
        # Ranked over media: the captions of `candidates` media may fill the shortlist.
        depth *= int(torch.bincount(caption_media).max())
    depth = min(depth, gallery.shape[0])
    chunk = max(1, default_chunk_size(gallery.shape[0]) // 2)  # float64 scores: half the rows
    shortlist = torch.cat([_shortlist(queries[start:start + chunk], gallery,
                                      gallery_group[None] == query_group[start:start + chunk, None],
                                      depth)
                           for start in range(0, queries.shape[0], chunk)])
    reordered = torch.stack([
        candidates[ties_against_query(
            _candidate_scores(scoring, direction, media, captions, query, candidates),
            gallery_group[candidates] == query_group[query])]
        for query, candidates in enumerate(shortlist)]) if len(shortlist) else shortlist
    return ranks_from_topk(reordered, query_group, gallery_group, grouped=grouped)


def _shortlist(queries: Tensor, gallery: Tensor, positive: Tensor, depth: int) -> Tensor:
    """The ``depth`` gallery items of highest pooled cosine for each query, a positive tied at
    the cut left out for the negatives it ties with: the tie counts against the query at the
    shortlist's edge too (a collapsed model's positives are not shortlisted by index order).

    Args:
        queries: ``[q, E]`` and ``gallery`` ``[G, E]`` pooled embeddings.
        positive: ``[q, G]`` bool, whether each item is a positive of the query.
        depth: the shortlist's length.

    Returns:
        ``[q, depth]`` gallery indices.
    """
    scores = (queries.float() @ gallery.float().T).double()
    # The next double below a positive's float32 score: below the negatives it ties with,
    # above any lower float32 score, so the order is otherwise the scores'. In place, at the
    # positives alone: the block is the chunk's memory.
    at = positive.nonzero(as_tuple=True)
    scores[at] = torch.nextafter(scores[at], scores.new_tensor(-math.inf))
    return scores.topk(depth, dim=1).indices


def _query_block(scoring: TokenScoring, direction: str, media: TokenSet, captions: TokenSet,
                 queries: slice) -> Tensor:
    device = scoring.resolved_device
    if direction == 't2i':
        return pairwise_token_scores(scoring.score, media, captions.select(queries),
                                     device=device).T
    return pairwise_token_scores(scoring.score, media.select(queries), captions, device=device)


def _candidate_scores(scoring: TokenScoring, direction: str, media: TokenSet,
                      captions: TokenSet, query: int, candidates: Tensor) -> Tensor:
    device = scoring.resolved_device
    if direction == 't2i':
        scores = pairwise_token_scores(scoring.score, media.select(candidates),
                                       captions.select(slice(query, query + 1)),
                                       device=device)[:, 0]
    else:
        scores = pairwise_token_scores(scoring.score, media.select(slice(query, query + 1)),
                                       captions.select(candidates), device=device)[0]
    if bool(torch.isnan(scores).any()):
        # argsort would put a NaN first: the candidate would outrank every real score.
        raise ValueError(f'the token score of query {query} is NaN for some of its candidates; '
                         'a NaN score has no rank: check the score function.')
    return scores
