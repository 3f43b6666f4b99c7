"""Ranks and rank statistics of retrieval on similarity matrices.

Every function here is pure and works on a similarity block ``scores [Q, G]`` (queries ×
gallery items, higher = more similar) together with *groups* that say which gallery items are a
query's positives: gallery item ``g`` is a positive of query ``q`` when
``gallery_group[g] == query_group[q]``. That covers both directions of image–text retrieval:

* text→media: queries are captions, ``query_group`` = the index of each caption's media, the
  gallery is the media with ``gallery_group = arange(M)`` (one positive per query);
* media→text: queries are media with ``query_group = arange(M)``, the gallery is the captions
  with ``gallery_group`` = the index of each caption's media (one or several positives).

**Tie rule.** A tie counts against the query: the rank of a query is
``1 + #{negatives g : scores[q, g] >= best positive score}``, where the best positive score is
the highest score among the query's positives. With one positive this is "1 + the number of
other gallery items scoring at least as high as the positive"; with several positives (an image
and its five captions) it is the rank of the best-ranked own caption, so the query is a hit at K
when *any* of its captions is in the top K. Positives never count against each other. Ranks are
1-based.

**Grouped media→text** (the DASD authors' code): the captions are grouped by media, each group is
scored by its best caption, and ranks are taken over groups,
``1 + #{other media m : max_{c of m} scores[q, c] >= best own caption score}``. A hit at 1 is the
same event as in the standard protocol; at K > 1 a grouped rank is never larger than the standard
one, because an other media's several captions ahead of the query's best caption count once.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = [
    'positive_pairs', 'ranks_from_pairs', 'ranks_from_scores', 'group_max_scores',
    'grouped_ranks_from_scores', 'text_to_media_ranks', 'media_to_text_ranks', 'ranks_from_topk',
    'recall_at_k', 'median_rank', 'mean_rank', 'rank_summary', 'average_recall', 'recall_sum',
    'ties_against_query',
]


def positive_pairs(query_group: Tensor, gallery_group: Tensor) -> tuple[Tensor, Tensor]:
    """Every (query, gallery item) pair of the same group, ordered by query.

    Args:
        query_group: ``[Q]`` integer group of each query.
        gallery_group: ``[G]`` integer group of each gallery item.

    Returns:
        ``rows [P]`` and ``cols [P]`` int64: ``gallery_group[cols[p]] == query_group[rows[p]]``,
        ``rows`` non-decreasing.

    Raises:
        ValueError: when a query has no positive in the gallery.
    """
    order = gallery_group.argsort(stable=True)
    sorted_groups = gallery_group[order]
    first = torch.searchsorted(sorted_groups, query_group, right=False)
    counts = torch.searchsorted(sorted_groups, query_group, right=True) - first
    _check_positives(counts > 0)
    rows = torch.repeat_interleave(torch.arange(query_group.shape[0]), counts)
    # Offset of each pair inside its query's run of positives.
    run_start = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    offsets = torch.arange(rows.shape[0]) - run_start
    return rows, order[first[rows] + offsets]


def ranks_from_pairs(scores: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    """Ranks given the positives as (row, column) pairs of ``scores``; the tie rule above.

    ``rank[q] = #{g : scores[q, g] >= best[q]} - #{positives at best[q]} + 1`` with
    ``best[q]`` the highest positive score, which equals
    ``1 + #{negatives scoring >= best[q]}`` without building a ``[Q, G]`` positive mask.

    Args:
        scores: ``[Q, G]`` similarities.
        rows: ``[P]`` query row of each positive pair; every row in ``[0, Q)`` occurs.
        cols: ``[P]`` gallery column of each positive pair.

    Returns:
        ``[Q]`` int64 ranks, 1-based.

    Raises:
        ValueError: when a score is NaN (no comparison holds for it: a NaN best positive would
            rank first, a NaN negative never count).
    """
    _check_no_nan(scores)
    positive_scores = scores[rows, cols]
    best = scores.new_full((scores.shape[0],), float('-inf'))
    best = best.scatter_reduce(0, rows, positive_scores, reduce='amax')
    positives_at_best = torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device)
    positives_at_best.scatter_add_(0, rows, (positive_scores >= best[rows]).long())
    # Bytes summed into int32 (a count is at most G): count_nonzero's int64 took 2.3x as long,
    # a quarter of a COCO 5K evaluation.
    at_least_best = (scores >= best[:, None]).view(torch.uint8).sum(dim=1, dtype=torch.int32)
    return at_least_best.long() - positives_at_best + 1


def ranks_from_scores(scores: Tensor, query_group: Tensor, gallery_group: Tensor) -> Tensor:
    """Rank of each query's best positive, ties counting against the query.

    ``rank[q] = 1 + #{g : gallery_group[g] != query_group[q],
    scores[q, g] >= max_{g' : gallery_group[g'] == query_group[q]} scores[q, g']}``.

    Args:
        scores: ``[Q, G]`` similarities.
        query_group: ``[Q]`` integer group of each query.
        gallery_group: ``[G]`` integer group of each gallery item.

    Returns:
        ``[Q]`` int64 ranks, 1-based.

    Raises:
        ValueError: on mismatched shapes, a NaN score or a query without any positive in the
            gallery.
    """
    _check_block(scores, query_group, gallery_group)
    rows, cols = positive_pairs(query_group.cpu(), gallery_group.cpu())
    return ranks_from_pairs(scores, rows.to(scores.device), cols.to(scores.device))


def group_max_scores(scores: Tensor, gallery_group: Tensor, num_groups: int) -> Tensor:
    """Score of every gallery group = the best score among its items.

    Args:
        scores: ``[Q, G]`` similarities.
        gallery_group: ``[G]`` group of each gallery item, in ``[0, num_groups)``.
        num_groups: number of groups ``M``.

    Returns:
        ``[Q, M]`` with ``out[q, m] = max_{g : gallery_group[g] == m} scores[q, g]`` (``-inf``
        for a group without items).
    """
    if gallery_group.numel() and int(gallery_group.max()) >= num_groups:
        raise ValueError(f'gallery_group holds group {int(gallery_group.max())} but num_groups '
                         f'is {num_groups}.')
    out = scores.new_full((scores.shape[0], num_groups), float('-inf'))
    index = gallery_group.to(scores.device).expand(scores.shape[0], -1)
    return out.scatter_reduce(1, index, scores, reduce='amax', include_self=True)


def grouped_ranks_from_scores(scores: Tensor, query_group: Tensor, gallery_group: Tensor,
                              num_groups: int) -> Tensor:
    """Ranks over gallery *groups*, each group scored by its best item (DASD authors' code).

    Args:
        scores: ``[Q, G]`` similarities.
        query_group: ``[Q]`` group of each query (its positive group).
        gallery_group: ``[G]`` group of each gallery item, in ``[0, num_groups)``.
        num_groups: number of groups ``M``.

    Returns:
        ``[Q]`` int64 ranks among the ``M`` groups, 1-based, ties against the query.

    Raises:
        ValueError: on mismatched shapes, a NaN score, or a query whose group has no item.
    """
    _check_block(scores, query_group, gallery_group)
    group_scores = group_max_scores(scores, gallery_group, num_groups)
    # A group without items scores -inf: its queries would rank last, not be refused.
    has_items = torch.zeros(num_groups, dtype=torch.bool)
    has_items[gallery_group.cpu()] = True
    _check_positives(has_items[query_group.cpu()])
    groups = torch.arange(num_groups, device=scores.device)
    return ranks_from_scores(group_scores, query_group.to(scores.device), groups)


def text_to_media_ranks(scores: Tensor, caption_media: Tensor) -> Tensor:
    """Text→media ranks: each caption's own media among all media.

    Args:
        scores: ``[C, M]`` caption × media similarities.
        caption_media: ``[C]`` index of each caption's media.

    Returns:
        ``[C]`` int64 ranks.
    """
    media = torch.arange(scores.shape[1], device=scores.device)
    return ranks_from_scores(scores, caption_media.to(scores.device), media)


def media_to_text_ranks(scores: Tensor, caption_media: Tensor, grouped: bool = False) -> Tensor:
    """Media→text ranks with one or several captions per media.

    Standard: the rank of the media's best-ranked own caption among all captions (a hit at K when
    any own caption is in the top K). ``grouped=True``: ranks over per-media caption groups,
    each scored by its best caption (see the module docstring).

    Args:
        scores: ``[M, C]`` media × caption similarities.
        caption_media: ``[C]`` index of each caption's media.
        grouped: rank caption groups instead of captions.

    Returns:
        ``[M]`` int64 ranks.
    """
    media = torch.arange(scores.shape[0], device=scores.device)
    caption_media = caption_media.to(scores.device)
    if grouped:
        return grouped_ranks_from_scores(scores, media, caption_media, scores.shape[0])
    return ranks_from_scores(scores, media, caption_media)


def ranks_from_topk(indices: Tensor, query_group: Tensor, gallery_group: Tensor,
                    grouped: bool = False) -> Tensor:
    """Ranks read from retrieved top-k lists (approximate search).

    The rank is the position of the first positive in the list (``grouped``: the number of
    distinct other groups before it, plus one). A query whose list holds no positive gets
    ``1 + #{distinct negatives (groups) in its list} + #{empty slots}``: an empty slot stands
    for an item the search did not return, so a positive it did not return is a miss at every
    ``K`` up to the list's length (``k`` slots; ``grouped``, ``k / (largest group size)``
    groups), and ``R@K`` is exact for those ``K``. Ties follow the lists' order: order them
    with :func:`ties_against_query` first for the tie rule above.

    Args:
        indices: ``[Q, k]`` gallery indices in decreasing score order; ``-1`` marks an empty slot
            (faiss returns it when it found fewer than ``k`` items).
        query_group: ``[Q]`` group of each query.
        gallery_group: ``[G]`` group of each gallery item.
        grouped: count distinct groups instead of items.

    Returns:
        ``[Q]`` int64 ranks.
    """
    if indices.dim() != 2 or indices.shape[0] != query_group.shape[0]:
        raise ValueError(f'indices must be [Q, k] with Q = {query_group.shape[0]}, '
                         f'got {tuple(indices.shape)}.')
    valid = indices >= 0
    retrieved_group = torch.where(valid, gallery_group[indices.clamp(min=0)],
                                  torch.full_like(indices, -1))
    hit = valid & (retrieved_group == query_group[:, None])
    counts = valid & ~hit
    if grouped:
        # Only the first appearance of a negative group in the list moves the query down. A
        # stable sort of each list by group puts a group's first appearance first in its run:
        # O(k log k) a list, where comparing each slot with those before it was O(k^2) (16 s
        # for 1,000 lists of 2,000, a re-ranked MSR-VTT shortlist; 0.2 s ungrouped).
        order = retrieved_group.argsort(dim=1, stable=True)
        ordered = retrieved_group.gather(1, order)
        starts_run = torch.ones_like(valid)
        starts_run[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
        counts &= torch.empty_like(valid).scatter_(1, order, starts_run)
    # An empty slot is an item the search did not return: it counts ahead of an unfound positive.
    counts |= ~valid
    found = hit.any(dim=1)
    first_hit = torch.where(found, hit.int().argmax(dim=1),
                            torch.full_like(query_group, indices.shape[1]))
    before_hit = torch.arange(indices.shape[1])[None, :] < first_hit[:, None]
    return (counts & before_hit).sum(dim=1) + 1


def ties_against_query(scores: Tensor, positive: Tensor) -> Tensor:
    """The order of retrieved lists by decreasing score, each positive after the negatives it
    ties with: the tie rule above for lists whose own order of tied items is arbitrary (a
    faiss index's, a shortlist's), so that a collapsed model scores 0, not what that order gives.

    Args:
        scores: ``[..., k]`` scores of each list.
        positive: ``[..., k]`` bool, whether each item is a positive of the list's query.

    Returns:
        ``[..., k]`` int64 positions into each list.
    """
    negatives_first = positive.int().argsort(dim=-1, stable=True)
    by_score = scores.gather(-1, negatives_first).argsort(dim=-1, descending=True, stable=True)
    return negatives_first.gather(-1, by_score)


def recall_at_k(ranks: Tensor, k: int) -> float:
    """R@K in percent: ``100 * mean(rank <= K)``."""
    _check_ranks(ranks)
    return 100.0 * float((ranks <= k).double().mean())


def median_rank(ranks: Tensor) -> float:
    """Median rank (MdR); for an even count, the mean of the two middle ranks (numpy median)."""
    _check_ranks(ranks)
    return float(np.median(ranks.cpu().numpy()))


def mean_rank(ranks: Tensor) -> float:
    """Mean rank (MnR)."""
    _check_ranks(ranks)
    return float(ranks.double().mean())


def rank_summary(ranks: Tensor, recall_ks: Sequence[int], direction: str,
                 exact: bool = True) -> dict[str, float]:
    """R@K for every K, then MdR and MnR, keyed ``f'{direction}_R@{k}'``, ``..._MdR``, ``..._MnR``.

    Args:
        ranks: ``[Q]`` 1-based ranks.
        recall_ks: the K values.
        direction: key prefix, ``'t2i'`` or ``'i2t'``.
        exact: False for ranks from approximate top-k lists: MdR and MnR are left out, since
            ranks beyond the list are only lower bounds.
    """
    summary = {f'{direction}_R@{k}': recall_at_k(ranks, k) for k in recall_ks}
    if exact:
        summary[f'{direction}_MdR'] = median_rank(ranks)
        summary[f'{direction}_MnR'] = mean_rank(ranks)
    return summary


def recall_sum(summary: Mapping[str, float], directions: Sequence[str],
               recall_ks: Sequence[int]) -> float:
    """rSum: the sum of R@K over directions and K (six recalls for R@1/5/10 both ways)."""
    return sum(summary[f'{direction}_R@{k}'] for direction in directions for k in recall_ks)


def average_recall(summary: Mapping[str, float], directions: Sequence[str],
                   recall_ks: Sequence[int]) -> float:
    """AR (MLA/DASD): the mean of the recalls, ``rSum / (len(directions) * len(recall_ks))``."""
    return recall_sum(summary, directions, recall_ks) / (len(directions) * len(recall_ks))


def _check_block(scores: Tensor, query_group: Tensor, gallery_group: Tensor) -> None:
    if scores.dim() != 2:
        raise ValueError(f'scores must be a [Q, G] matrix, got shape {tuple(scores.shape)}.')
    if query_group.shape != (scores.shape[0],) or gallery_group.shape != (scores.shape[1],):
        raise ValueError(f'scores {tuple(scores.shape)} need query_group [{scores.shape[0]}] and '
                         f'gallery_group [{scores.shape[1]}], got {tuple(query_group.shape)} and '
                         f'{tuple(gallery_group.shape)}.')


def _check_positives(has_positive: Tensor) -> None:
    """``has_positive``: ``[Q]`` bool, whether each query's group occurs in the gallery."""
    if not bool(has_positive.all()):
        missing = torch.nonzero(~has_positive).flatten()[:5].tolist()
        raise ValueError(f'queries {missing} (row indices) have no positive gallery item; every '
                         'query group must occur in gallery_group.')


def _check_no_nan(scores: Tensor) -> None:
    # A NaN makes its row's sum NaN: only rows whose sum is NaN (infinities of both signs make
    # one too) are searched, not every score (a tenth of a COCO 5K evaluation).
    suspect = torch.isnan(scores.sum(dim=1))
    if not bool(suspect.any()):
        return
    nan_rows = torch.zeros_like(suspect)
    nan_rows[suspect] = torch.isnan(scores[suspect]).any(dim=1)
    if bool(nan_rows.any()):
        rows = torch.nonzero(nan_rows).flatten()[:5].tolist()
        raise ValueError(f'similarity scores of query rows {rows} (of a block of '
                         f'{scores.shape[0]}) are NaN; a NaN score has no rank: check the '
                         'embeddings or the score function.')


def _check_ranks(ranks: Tensor) -> None:
    if ranks.numel() == 0:
        raise ValueError('no ranks to summarise: the evaluation has no queries.')
