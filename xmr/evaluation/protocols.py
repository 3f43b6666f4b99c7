"""Evaluation protocols of cross-lingual cross-modal retrieval.

A protocol says which media form the gallery (one gallery, or several whose results are averaged),
which directions are scored by default and how large the gallery must be:

========================  ==========================================================  ==========
protocol                  galleries                                                   directions
========================  ==========================================================  ==========
``standard``              all media                                                   t2i, i2t
``coco_5k``               all 5,000 COCO test images                                  t2i, i2t
``coco_1k_5fold``         5 folds of 1,000 consecutive images; mean over folds        t2i, i2t
``text_to_video``         all clips (Multi-MSRVTT 1k-A: 1,000 clips, one caption)     t2i
``xtd10_t2i_r10``         all 1,000 XTD10 images (M-CLIP: text→image R@10)            t2i
``xtd10_fewshot``         the 900 test images of the seed-42 split (PECTVLM)          t2i, i2t
``crossmodal3600``        all 3,600 images, all captions of the language              t2i, i2t
``crossmodal3600_first_   all 3,600 images, each with only its first caption           t2i, i2t
caption``                 (CLIP_benchmark)
``xtd200``                all 1,000 XTD images, one NLLB caption each                 t2i, i2t
``flickr30k_200``         all 1,000 Flickr30K 1K-test images, one NLLB caption each   t2i, i2t
``text_to_text``          every item's first source caption (no media needed)         t2s, s2t
========================  ==========================================================  ==========

``text_to_text`` is cross-lingual text retrieval: each item's first source-language caption
stands where its media would, so a target caption is a hit at K when its own item's source
caption is in its top K (``t2s``, the ``t2i`` ranking) and a source caption when any of its
item's target captions is (``s2t``, the ``i2t`` ranking). On parallel sets (Multi30K task 1,
XTD10, machine-translated pairs) that first source caption is the sentence every target caption
translates. It scores text-only models and validates the cross-lingual phase without decoding
media; AR and mAR are the same means of the six recalls.

Within a gallery, a language is evaluated on the media that have at least one caption in it, so
that both directions of one language share one set of media (COCO-CN's ~1,000 zh images inside a
larger COCO set, for instance).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from xmr.evaluation.ranking import (
    average_recall,
    rank_summary,
    ranks_from_topk,
    recall_sum,
    ties_against_query,
)
from xmr.evaluation.search import (
    FaissSearcher,
    blockwise_ranks,
    check_search_options,
    exact_ranks,
)
from xmr.evaluation.token_scoring import TokenScoring, TokenSet, token_ranks
from xmr.utils.counts import check_count, is_count
from xmr.utils.listing import repeated

__all__ = [
    'Protocol', 'PROTOCOLS', 'DIRECTIONS', 'I2T_MODES', 'FewShotSplit', 'LanguageGallery',
    'coco_1k_folds', 'xtd10_fewshot_split', 'protocol_galleries', 'evaluate_language',
    'evaluate_protocol', 'check_recall_ks', 'check_i2t_mode', 'check_folds', 'ranked_galleries',
    'SHARED_SCORES_ELEMENTS', 'MediaSearchers',
]

DIRECTIONS = ('t2i', 'i2t')
I2T_MODES = ('standard', 'grouped')
#: The most scores of a ``[C, M]`` caption × media matrix that both directions rank from one
#: product (512 MiB of float32; COCO 5K's 25,000 × 5,000 fit): ``t2i`` reads its rows, ``i2t``
#: its columns. A larger gallery ranks each direction from bounded blocks of its own.
SHARED_SCORES_ELEMENTS = 2 ** 27


@dataclass(frozen=True)
class Protocol:
    """What a protocol fixes.

    Attributes:
        name: registry key in :data:`PROTOCOLS`.
        directions: directions scored unless the caller asks for others.
        gallery_size: the number of media the protocol is defined on; ``None`` for any.
        captions_per_media: how many of a media's captions (its first ones, in file order) the
            protocol ranks; ``None`` for all.
        text_gallery: the gallery is each item's first source-language caption, not its media.
        direction_names: what the keys call ``t2i`` and ``i2t`` (``t2s`` and ``s2t``,
            target→source and source→target, for a text gallery).
    """

    name: str
    directions: tuple[str, ...]
    gallery_size: int | None
    captions_per_media: int | None = None
    text_gallery: bool = False
    direction_names: tuple[str, str] = DIRECTIONS

    def key_direction(self, direction: str) -> str:
        """The name of ``direction`` (``'t2i'`` / ``'i2t'``) in this protocol's metric keys."""
        return self.direction_names[DIRECTIONS.index(direction)]

    def ranking_direction(self, name: str) -> str:
        """The ranking (``'t2i'`` / ``'i2t'``) a direction named in this protocol's terms runs.

        Raises:
            ValueError: a name the protocol does not use, listing those it does.
        """
        if name not in self.direction_names:
            raise ValueError(f"protocol '{self.name}' names its directions "
                             f'{self.direction_names}, got {name!r}.')
        return DIRECTIONS[self.direction_names.index(name)]


PROTOCOLS: dict[str, Protocol] = {
    protocol.name: protocol for protocol in (
        Protocol('standard', DIRECTIONS, None),
        Protocol('coco_5k', DIRECTIONS, 5000),
        Protocol('coco_1k_5fold', DIRECTIONS, 5000),
        Protocol('text_to_video', ('t2i',), None),
        Protocol('xtd10_t2i_r10', ('t2i',), 1000),
        Protocol('xtd10_fewshot', DIRECTIONS, 1000),
        Protocol('crossmodal3600', DIRECTIONS, 3600),
        Protocol('crossmodal3600_first_caption', DIRECTIONS, 3600, captions_per_media=1),
        Protocol('xtd200', DIRECTIONS, 1000),
        Protocol('flickr30k_200', DIRECTIONS, 1000),
        Protocol('text_to_text', DIRECTIONS, None, text_gallery=True,
                 direction_names=('t2s', 's2t')),
    )
}


class FewShotSplit(NamedTuple):
    """Image indices (positions in XTD10's 1,000-image order) of a few-shot split."""

    train: list[int]
    val: list[int]
    test: list[int]


def xtd10_fewshot_split(num_images: int = 1000, shots: int = 50, seed: int = 42) -> FewShotSplit:
    """PECTVLM's XTD10 few-shot split.

    ``perm = torch.randperm(num_images, generator=torch.Generator().manual_seed(seed))``;
    train = ``perm[:shots]``, val = ``perm[shots:2 * shots]``, test = ``perm[2 * shots:]``
    (900 test images at the defaults).

    Args:
        num_images: images in the set (1,000 for XTD10).
        shots: images in the train split (and in the val split).
        seed: seed of the permutation's generator.

    Returns:
        The three index lists, in permutation order.
    """
    if shots < 1 or 2 * shots >= num_images:
        raise ValueError(f'shots must be in [1, {(num_images - 1) // 2}] so that train, val and '
                         f'test are non-empty for {num_images} images, got {shots}.')
    generator = torch.Generator().manual_seed(seed)
    perm = torch.randperm(num_images, generator=generator).tolist()
    return FewShotSplit(perm[:shots], perm[shots:2 * shots], perm[2 * shots:])


def coco_1k_folds(num_media: int, num_folds: int = 5) -> list[Tensor]:
    """Indices of ``num_folds`` folds of consecutive media (COCO 1K: 5 × 1,000 of the 5K test).

    Args:
        num_media: media in the gallery, a multiple of ``num_folds``.
        num_folds: number of folds.

    Returns:
        ``num_folds`` int64 index tensors ``[num_media // num_folds]``.
    """
    if num_folds < 1 or num_media % num_folds:
        raise ValueError(f'{num_media} media cannot be split into {num_folds} equal folds.')
    return list(torch.arange(num_media).split(num_media // num_folds))


@dataclass
class LanguageGallery:
    """The media and the captions of one language that one evaluation ranks.

    Attributes:
        media: ``[M, E]`` media embeddings.
        captions: ``[C, E]`` caption embeddings.
        caption_media: ``[C]`` int64 row of each caption's media in ``media``.
        media_tokens: the ``M`` media's token sequences, for a model's token score.
        caption_tokens: the ``C`` captions' token sequences.
    """

    media: Tensor
    captions: Tensor
    caption_media: Tensor
    media_tokens: TokenSet | None = None
    caption_tokens: TokenSet | None = None

    def __post_init__(self) -> None:
        if self.media.dim() != 2 or self.captions.dim() != 2:
            raise ValueError(f'media [M, E] and captions [C, E] must be matrices, got '
                             f'{tuple(self.media.shape)} and {tuple(self.captions.shape)}.')
        if self.captions.shape[0] and self.captions.shape[1] != self.media.shape[1]:
            raise ValueError(f'captions have dimension {self.captions.shape[1]}, media '
                             f'{self.media.shape[1]}.')
        if not (bool(torch.isfinite(self.media).all()) and
                bool(torch.isfinite(self.captions).all())):
            # faiss ranks NaN without complaint: an approximate search would score garbage.
            raise ValueError('media or caption embeddings hold NaN or inf values; they have no '
                             'rank.')
        if self.caption_media.shape != (self.captions.shape[0],):
            raise ValueError(f'caption_media must be [{self.captions.shape[0]}], got '
                             f'{tuple(self.caption_media.shape)}.')
        if self.caption_media.numel() and not (
                0 <= int(self.caption_media.min()) and
                int(self.caption_media.max()) < self.media.shape[0]):
            raise ValueError(f'caption_media must index the {self.media.shape[0]} media rows.')
        if (self.media_tokens is None) != (self.caption_tokens is None):
            raise ValueError('a gallery has token sets for both media and captions or for none.')
        if self.media_tokens is not None and (
                len(self.media_tokens), len(self.caption_tokens)) != (
                self.media.shape[0], self.captions.shape[0]):
            raise ValueError(f'token sets of {len(self.media_tokens)} media and '
                             f'{len(self.caption_tokens)} captions for a gallery of '
                             f'{self.media.shape[0]} and {self.captions.shape[0]}.')

    def restrict(self, media_indices: Tensor) -> LanguageGallery:
        """The gallery of the given media that have at least one caption, captions re-indexed
        (this gallery itself when that is every media, in order).

        Args:
            media_indices: ``[S]`` rows of ``media`` to keep, in the order they are kept.
        """
        captioned = torch.zeros(self.media.shape[0], dtype=torch.bool)
        captioned[self.caption_media] = True
        kept = media_indices[captioned[media_indices]]
        if kept.numel() == self.media.shape[0] and bool(
                (kept == torch.arange(kept.numel())).all()):
            # Every media in order (the standard protocol's one gallery): re-indexing would copy
            # the media and every caption into a gallery equal to this one.
            return self
        new_row = torch.full((self.media.shape[0],), -1, dtype=torch.long)
        new_row[kept] = torch.arange(kept.numel())
        caption_rows = new_row[self.caption_media]
        keep_caption = caption_rows >= 0
        if self.media_tokens is None:
            return LanguageGallery(self.media[kept], self.captions[keep_caption],
                                   caption_rows[keep_caption])
        return LanguageGallery(self.media[kept], self.captions[keep_caption],
                               caption_rows[keep_caption], self.media_tokens.select(kept),
                               self.caption_tokens.select(keep_caption.nonzero().flatten()))


class MediaSearchers:
    """The approximate index that captions were last ranked against, kept for the next language
    whose gallery is the same media tensor (every language of a gallery of all the media): its
    build (IVF's k-means, HNSW's graph) is as long for each language as for the first.

    Only the last index is kept, so a gallery of other media (a fold, a language captioning part
    of the set) replaces it and memory holds one index, as when each language built its own.
    """

    def __init__(self) -> None:
        self._media: Tensor | None = None
        self._options: dict[str, Any] = {}
        self._searcher: FaissSearcher | None = None

    def searcher(self, media: Tensor, options: Mapping[str, Any]) -> FaissSearcher:
        """The index over ``media`` (``[M, E]``) built with ``options``
        (:class:`~xmr.evaluation.search.FaissSearcher`'s), built only when the last one differs."""
        if media is not self._media or dict(options) != self._options:
            # Let the last index go before the next is built: one in memory at a time.
            self._media = self._searcher = None
            self._searcher = FaissSearcher(media, **options)
            self._media, self._options = media, dict(options)
        return self._searcher


def check_folds(num_folds: int, folds: Sequence[int] | None) -> None:
    """Refuse ``coco_1k_5fold`` folds that do not exist, before any media is encoded.

    Args:
        num_folds: folds the gallery is split into.
        folds: the folds averaged; ``None`` = all.

    Raises:
        ValueError: ``num_folds`` below 1, an empty ``folds`` (no fold to average), a fold
            outside ``0..num_folds - 1`` or given twice (the mean would count it twice).
    """
    check_count(num_folds, 'num_folds')
    if folds is None:
        return
    if not len(folds):
        raise ValueError(f'folds {tuple(folds)} name no fold to average; give None for all '
                         f'{num_folds} or some of 0..{num_folds - 1}.')
    for fold in folds:
        if not 0 <= fold < num_folds:
            raise ValueError(f'fold {fold} does not exist; folds are 0..{num_folds - 1}.')
    twice = repeated(folds)
    if twice:
        raise ValueError(f'folds {tuple(folds)} repeat fold {", ".join(map(str, twice))}: the '
                         'mean over folds would count it twice; give each fold once.')


def ranked_galleries(protocol: str, num_folds: int = 5, folds: Sequence[int] | None = None,
                     shots: int = 50, split_seed: int = 42, source_language: str = 'en') -> str:
    """What ``protocol`` ranks where it is not the whole set with every caption, as a result
    records it beside its test set (``''`` where it is): recalls of other galleries are not
    read in one table (COCO's 1K folds give far higher ones than its 5K gallery).

    Args:
        protocol: a key of :data:`PROTOCOLS`.
        num_folds, folds, shots, split_seed: as :func:`protocol_galleries` takes them.
        source_language: the language of a text gallery's captions.

    Returns:
        ``'coco_1k_5fold: fold 0 of 5'``, ``'xtd10_fewshot: the test images of the 50-shot
        split of seed 42'``, ...; ``''`` for a protocol ranking every item against every
        caption (``standard``, ``coco_5k``, ``xtd200``, ...).
    """
    if protocol == 'coco_1k_5fold':
        if folds is None or sorted(folds) == list(range(num_folds)):
            return f'{protocol}: mean over its {num_folds} folds'
        named = ', '.join(map(str, sorted(folds)))
        return f"{protocol}: fold{'s' * (len(folds) > 1)} {named} of {num_folds}"
    if protocol == 'xtd10_fewshot':
        return f'{protocol}: the test images of the {shots}-shot split of seed {split_seed}'
    if PROTOCOLS[protocol].text_gallery:
        return f"{protocol}: against each item's first {source_language} caption"
    if PROTOCOLS[protocol].captions_per_media is not None:
        count = PROTOCOLS[protocol].captions_per_media
        first = 'first caption' if count == 1 else f'first {count} captions'
        return f"{protocol}: each item's {first} only"
    return ''


def protocol_galleries(protocol: str, num_media: int, gallery_size: int | None = None,
                       num_folds: int = 5, folds: Sequence[int] | None = None,
                       shots: int = 50, split_seed: int = 42) -> list[Tensor]:
    """Media indices of every gallery a protocol evaluates (results are averaged over them).

    Args:
        protocol: a key of :data:`PROTOCOLS`.
        num_media: media in the evaluation set, in dataset order.
        gallery_size: media count the set must have; ``None`` takes the protocol's own
            (5,000 for COCO, 1,000 for XTD10, any for the others).
        num_folds: folds of ``coco_1k_5fold``.
        folds: which folds ``coco_1k_5fold`` averages; ``None`` = all (MLA), ``(0,)`` = the
            DASD authors' fold 0.
        shots: train/val images per split of ``xtd10_fewshot``.
        split_seed: generator seed of ``xtd10_fewshot``.

    Returns:
        One int64 index tensor per gallery.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol '{protocol}'; choose one of {sorted(PROTOCOLS)}.")
    expected = gallery_size if gallery_size is not None else PROTOCOLS[protocol].gallery_size
    if expected is not None and num_media != expected:
        raise ValueError(f"protocol '{protocol}' is defined on {expected} media, the evaluation "
                         f'set has {num_media}; pass gallery_size to evaluate another size.')
    if num_media == 0:
        raise ValueError('the evaluation gallery is empty: no media were evaluated.')
    if protocol == 'coco_1k_5fold':
        check_folds(num_folds, folds)
        all_folds = coco_1k_folds(num_media, num_folds)
        return [all_folds[fold] for fold in (range(num_folds) if folds is None else folds)]
    if protocol == 'xtd10_fewshot':
        return [torch.tensor(xtd10_fewshot_split(num_media, shots, split_seed).test)]
    return [torch.arange(num_media)]


def evaluate_language(gallery: LanguageGallery, directions: Sequence[str] = DIRECTIONS,
                      recall_ks: Sequence[int] = (1, 5, 10), i2t_mode: str = 'standard',
                      search: Mapping[str, Any] | None = None,
                      token_scoring: TokenScoring | None = None,
                      media_searchers: MediaSearchers | None = None) -> dict[str, float]:
    """R@K, MdR, MnR of each direction (and AR, rSum with both) for one language and gallery.

    Args:
        gallery: media and captions of the language.
        directions: ``'t2i'`` (captions query media) and/or ``'i2t'`` (media query captions).
        recall_ks: the K of R@K.
        i2t_mode: ``'standard'`` (rank of the best own caption among captions) or ``'grouped'``
            (among per-media caption groups, the DASD authors' code).
        search: ``dict(index='flat' | 'ivf' | 'hnsw', chunk_size=..., **faiss options)``.
            ``'flat'`` (default) computes exact ranks by chunked inner products (both
            directions from one ``[C, M]`` product up to :data:`SHARED_SCORES_ELEMENTS`); an
            approximate index ranks within its top-k lists, so MdR and MnR are left out.
        token_scoring: rank with the model's token score instead of the embeddings' cosine
            (:mod:`xmr.evaluation.token_scoring`; the gallery must hold token sets); its
            ``'tokens_rerank'`` mode ranks within the shortlists, so MdR and MnR are left out.
        media_searchers: where an approximate search keeps its index over the media, for the
            next language of the same gallery; ``None`` builds one for this call.

    Returns:
        ``{'t2i_R@1': ..., 't2i_MdR': ..., 'i2t_R@1': ..., 'AR': ..., 'rSum': ...}``, recalls in
        percent.
    """
    _check_options(directions, recall_ks, i2t_mode)
    if gallery.captions.shape[0] == 0:
        raise ValueError('the language has no captions in this gallery.')
    check_search_options(search or {})
    searcher_options = _searcher_options(search)
    if token_scoring is not None:
        _check_token_scoring(gallery, token_scoring, search or {}, recall_ks)
    exact = (token_scoring.mode == 'tokens' if token_scoring is not None
             else searcher_options['index'] == 'flat')
    chunk_size = searcher_options.get('chunk_size')
    num_media = gallery.media.shape[0]
    shared = _shared_scores(gallery) if (
        token_scoring is None and exact and set(directions) == set(DIRECTIONS)) else None
    summary: dict[str, float] = {}
    for direction in directions:
        queries, targets, query_group, gallery_group = _direction_sides(gallery, direction)
        direction_grouped = i2t_mode == 'grouped' and direction == 'i2t'
        if token_scoring is not None:
            ranks = token_ranks(token_scoring, direction, gallery.media_tokens,
                                gallery.caption_tokens, gallery.media, gallery.captions,
                                gallery.caption_media, grouped=direction_grouped)
        elif shared is not None:
            ranks = blockwise_ranks(_row_blocks(shared if direction == 't2i' else shared.T),
                                    query_group, gallery_group, grouped=direction_grouped,
                                    num_groups=num_media, chunk_size=chunk_size)
        elif exact:
            ranks = exact_ranks(queries, targets, query_group, gallery_group,
                                grouped=direction_grouped, num_groups=num_media,
                                chunk_size=chunk_size)
        else:
            searcher = (media_searchers.searcher(targets, searcher_options)
                        if direction == 't2i' and media_searchers is not None
                        else FaissSearcher(targets, **searcher_options))
            ranks = _approximate_ranks(searcher, queries, query_group, gallery_group,
                                       direction_grouped, max(recall_ks))
        summary.update(rank_summary(ranks, recall_ks, direction, exact=exact))
    if set(directions) == set(DIRECTIONS):
        summary['AR'] = average_recall(summary, DIRECTIONS, recall_ks)
        summary['rSum'] = recall_sum(summary, DIRECTIONS, recall_ks)
    return summary


def evaluate_protocol(gallery: LanguageGallery, galleries: Sequence[Tensor],
                      **evaluate_options: Any) -> dict[str, float]:
    """Evaluate one language on each protocol gallery and average every key over them.

    Args:
        gallery: all media and the language's captions.
        galleries: media indices of each gallery (:func:`protocol_galleries`).
        **evaluate_options: passed to :func:`evaluate_language`.

    Returns:
        The mean over galleries of each key of :func:`evaluate_language` (COCO 1K: the mean over
        folds of R@K, MdR, MnR, AR and rSum, as in the VSE++/MLA evaluation code).
    """
    per_gallery = []
    for number, media_indices in enumerate(galleries):
        subset = gallery.restrict(media_indices)
        if subset.captions.shape[0] == 0:
            raise ValueError(f'gallery {number} ({media_indices.numel()} media) holds no caption '
                             'of this language.')
        per_gallery.append(evaluate_language(subset, **evaluate_options))
    return {key: sum(result[key] for result in per_gallery) / len(per_gallery)
            for key in per_gallery[0]}


def _searcher_options(search: Mapping[str, Any] | None) -> dict[str, Any]:
    """:class:`~xmr.evaluation.search.FaissSearcher`'s options from ``search``: its index
    (``'flat'`` unless named), and ``chunk_size`` only where one is given."""
    options = {'index': 'flat', **(search or {})}
    if options.get('chunk_size') is None:
        options.pop('chunk_size', None)
    return options


def _check_token_scoring(gallery: LanguageGallery, token_scoring: TokenScoring,
                         search: Mapping[str, Any], recall_ks: Sequence[int]) -> None:
    """Refuse token scoring of a gallery without token sets, under an approximate search, or
    through shortlists shorter than the largest K."""
    if gallery.media_tokens is None:
        raise ValueError('token scoring needs the token sets of the media and captions; the '
                         'model emitted none.')
    if search.get('index', 'flat') != 'flat' or set(search) - {'index', 'chunk_size'}:
        raise ValueError("token scoring ranks exactly or re-ranks its own shortlist; the "
                         f"search options {dict(search)} do not apply to it.")
    if token_scoring.mode != 'tokens' and max(recall_ks) > token_scoring.candidates:
        raise ValueError(f'R@{max(recall_ks)} cannot be read from a re-ranked shortlist of '
                         f'{token_scoring.candidates}: a positive outside it would count as '
                         'a hit; raise rerank_candidates to the largest K at least.')


def _direction_sides(gallery: LanguageGallery,
                     direction: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(queries, targets, query_group, gallery_group)`` of ``direction``: captions query the
    media under ``'t2i'``, the media query captions under ``'i2t'``; a group is a media row."""
    media_rows = torch.arange(gallery.media.shape[0])
    if direction == 't2i':
        return gallery.captions, gallery.media, gallery.caption_media, media_rows
    return gallery.media, gallery.captions, media_rows, gallery.caption_media


def _shared_scores(gallery: LanguageGallery) -> Tensor | None:
    """``[C, M]`` caption × media scores both directions rank from, or ``None`` above
    :data:`SHARED_SCORES_ELEMENTS` (a second product was 28% of a COCO 5K-sized evaluation:
    37.6 s -> 26.9 s at 3 languages)."""
    if gallery.captions.shape[0] * gallery.media.shape[0] > SHARED_SCORES_ELEMENTS:
        return None
    # [M, C] then a transposed view: MKL runs this product about 1.7x faster than [C, E] @ [E, M].
    return (gallery.media.float() @ gallery.captions.float().T).T


def _row_blocks(scores: Tensor) -> Callable[[int, int], Tensor]:
    """The block function of :func:`~xmr.evaluation.search.blockwise_ranks` over a computed
    ``[Q, G]`` score matrix: rows ``start:stop``, a view."""
    return lambda start, stop: scores[start:stop]


def _approximate_ranks(searcher: FaissSearcher, queries: Tensor, query_group: Tensor,
                       gallery_group: Tensor, grouped: bool, max_k: int) -> Tensor:
    """Ranks read from the searcher's lists, ties counting against the query as in the exact
    ranks: a positive goes after the negatives it ties with
    (:func:`~xmr.evaluation.ranking.ties_against_query`), and each list is searched ``P`` items
    deeper than it is read, ``P`` the most positives a query has. A query whose best positive
    ranks within the list read then has every item scoring at least as high in the list
    searched, the tied negatives too; one ranking past it has the list read filled by those
    negatives. So an exhaustive search gives the exact ``R@K`` (tested), where faiss's order of
    tied items had 20 collapsed media score a text->image R@10 of 50, not 0."""
    most_positives = int(torch.bincount(gallery_group).max())
    # Grouped, every other media may place all of its captions ahead, so max_k groups can
    # take max_k times the largest caption count.
    depth = min(max_k * (most_positives if grouped else 1), searcher.gallery_size)
    scores, indices = searcher.search(queries, min(depth + most_positives, searcher.gallery_size))
    positive = (indices >= 0) & (gallery_group[indices.clamp(min=0)] == query_group[:, None])
    indices = indices.gather(1, ties_against_query(scores, positive))[:, :depth]
    return ranks_from_topk(indices, query_group, gallery_group, grouped=grouped)


def check_recall_ks(recall_ks: Sequence[int]) -> None:
    """Refuse K values that would miscount or misname a recall.

    Args:
        recall_ks: the K of R@K.

    Raises:
        ValueError: an empty list, a K that is not a positive integer (a float K would name
            its key ``R@1.0``, which the leaderboard and the CLIP_benchmark export do not read),
            or a repeated K (AR and rSum would count its recall twice).
    """
    if not recall_ks or not all(is_count(k) for k in recall_ks):
        raise ValueError(f'recall_ks must be positive integers, got {tuple(recall_ks)}.')
    twice = repeated(recall_ks)
    if twice:
        raise ValueError(f'recall_ks {tuple(recall_ks)} repeat {", ".join(map(str, twice))}; '
                         'AR and rSum would count those recalls twice: give each K once.')


def check_i2t_mode(i2t_mode: str) -> None:
    """Refuse a media→text ranking that is not one of :data:`I2T_MODES`.

    Raises:
        ValueError: naming the mode given and those there are.
    """
    if i2t_mode not in I2T_MODES:
        raise ValueError(f"i2t_mode must be one of {I2T_MODES}, got '{i2t_mode}'.")


def _check_options(directions: Sequence[str], recall_ks: Sequence[int], i2t_mode: str) -> None:
    unknown = [d for d in directions if d not in DIRECTIONS]
    if not directions or unknown:
        raise ValueError(f'directions must be a non-empty subset of {DIRECTIONS}, got '
                         f'{tuple(directions)}.')
    check_recall_ks(recall_ks)
    check_i2t_mode(i2t_mode)
