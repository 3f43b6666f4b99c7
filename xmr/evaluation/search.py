"""Nearest-neighbour search over an embedding gallery, and exact ranks for large galleries.

Embeddings are L2-normalised, so the inner product is the cosine similarity. Everything here
works on query chunks: a chunk of ``q`` queries meets the whole gallery as one ``[q, G]`` block,
and the full ``[Q, G]`` matrix of a 10k × 1M evaluation never exists.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import faiss
import numpy as np
import torch
from torch import Tensor

from xmr.evaluation.ranking import group_max_scores, positive_pairs, ranks_from_pairs
from xmr.utils.counts import is_count

__all__ = ['FaissSearcher', 'exact_ranks', 'blockwise_ranks', 'default_chunk_size', 'INDEX_TYPES',
           'check_search_options', 'SEARCH_TIME_OPTIONS']

INDEX_TYPES = ('flat', 'ivf', 'hnsw')
#: The :class:`FaissSearcher` options each index takes, besides ``chunk_size``.
INDEX_OPTIONS = {'flat': (), 'ivf': ('nlist', 'nprobe', 'train_size', 'seed'),
                 'hnsw': ('hnsw_m', 'ef_construction', 'ef_search')}
#: Those of :data:`INDEX_OPTIONS` that a built index takes anew (:meth:`FaissSearcher.tune`).
SEARCH_TIME_OPTIONS = {'flat': (), 'ivf': ('nprobe',), 'hnsw': ('ef_search',)}

# 2**26 float32 scores = 256 MiB per query block, whatever the gallery size.
_BLOCK_ELEMENTS = 2 ** 26


def check_search_options(search: Mapping[str, Any]) -> None:
    """Refuse a search configuration before anything is encoded or built.

    Args:
        search: ``dict(index='flat' | 'ivf' | 'hnsw', chunk_size=None, **options)``, as
            :class:`~xmr.evaluation.RetrievalMetric` takes it.

    Raises:
        ValueError: an unknown index, an option its index does not take (naming those it
            does), or a count that is not a positive integer.
    """
    index = search.get('index', 'flat')
    if index not in INDEX_TYPES:
        raise ValueError(f"search index must be one of {INDEX_TYPES}, got '{index}'.")
    accepted = ('chunk_size', *INDEX_OPTIONS[index])
    unknown = sorted(set(search) - {'index', *accepted})
    if unknown:
        raise ValueError(f"search options {unknown} do not apply to index '{index}'; it takes "
                         f'{accepted}.')
    _check_counts({name: value for name, value in search.items() if name != 'index'})
    nlist, train_size = search.get('nlist'), search.get('train_size')
    if nlist is not None and train_size is not None:
        _check_training_rows(train_size, nlist)


def _check_training_rows(train_size: int, nlist: int) -> None:
    if train_size < nlist:
        raise ValueError(f'IVF train_size {train_size} is smaller than nlist {nlist}: '
                         "k-means needs a training row per cell (faiss asks for 39); "
                         'raise train_size or lower nlist.')


def _check_counts(options: Mapping[str, Any]) -> None:
    """Every option an integer, ``seed`` >= 0 and the others >= 1; ``None`` where a default
    is computed (``chunk_size`` of the metric, ``nlist``, ``train_size``). faiss itself aborts
    the process on ``hnsw_m=0`` and fails only at search time on ``nprobe=0``."""
    for name, value in options.items():
        if value is None and name in ('chunk_size', 'nlist', 'train_size'):
            continue
        least = 0 if name == 'seed' else 1
        if not is_count(value, least):
            raise ValueError(f'search option {name} must be an integer >= {least}, got '
                             f'{value!r}.')


def default_chunk_size(gallery_size: int, block_elements: int = _BLOCK_ELEMENTS) -> int:
    """Queries per chunk so that one ``[chunk, G]`` score block holds ``block_elements`` scores."""
    return max(1, block_elements // max(1, gallery_size))


def exact_ranks(queries: Tensor, gallery: Tensor, query_group: Tensor, gallery_group: Tensor,
                grouped: bool = False, num_groups: int | None = None,
                chunk_size: int | None = None) -> Tensor:
    """Exact ranks by inner product, computed chunk of queries by chunk of queries.

    Each chunk's ``[q, G]`` block is ranked like :func:`~xmr.evaluation.ranking.ranks_from_scores`
    (or its grouped form) ranks the full matrix, ties counting against the query (see
    :func:`blockwise_ranks`).

    Args:
        queries: ``[Q, E]`` query embeddings.
        gallery: ``[G, E]`` gallery embeddings.
        query_group: ``[Q]`` group of each query.
        gallery_group: ``[G]`` group of each gallery item (see :mod:`xmr.evaluation.ranking`).
        grouped: rank groups of gallery items, each scored by its best item.
        num_groups: number of gallery groups; required when ``grouped``.
        chunk_size: queries per block; ``None`` keeps each block near 256 MiB.

    Returns:
        ``[Q]`` int64 ranks, 1-based.
    """
    _check_pair(queries, gallery)
    if query_group.shape != (queries.shape[0],) or gallery_group.shape != (gallery.shape[0],):
        raise ValueError(f'need query_group [{queries.shape[0]}] and gallery_group '
                         f'[{gallery.shape[0]}], got {tuple(query_group.shape)} and '
                         f'{tuple(gallery_group.shape)}.')
    gallery = gallery.float()

    def block(start: int, stop: int) -> Tensor:
        # [G, q] then a transposed view: with few queries and a long gallery, MKL runs this
        # product about 1.5x faster than [q, E] @ [E, G].
        return (gallery @ queries[start:stop].float().T).T

    return blockwise_ranks(block, query_group, gallery_group, grouped=grouped,
                           num_groups=num_groups, chunk_size=chunk_size)


def blockwise_ranks(block_scores: Callable[[int, int], Tensor], query_group: Tensor,
                    gallery_group: Tensor, grouped: bool = False, num_groups: int | None = None,
                    chunk_size: int | None = None) -> Tensor:
    """Exact ranks from score blocks of consecutive queries, whatever computes the scores.

    The best positive score and the scores it is compared with come out of the same block, so
    the ranks equal those of the full matrix; the positive pairs are found once for all blocks.

    Args:
        block_scores: ``block_scores(start, stop)`` -> ``[stop - start, G]`` scores of queries
            ``start:stop`` against the whole gallery.
        query_group: ``[Q]`` group of each query.
        gallery_group: ``[G]`` group of each gallery item.
        grouped: rank groups of gallery items, each scored by its best item.
        num_groups: number of gallery groups; required when ``grouped``.
        chunk_size: queries per block; ``None`` keeps each block near 256 MiB.

    Returns:
        ``[Q]`` int64 ranks, 1-based.
    """
    if grouped and num_groups is None:
        raise ValueError('exact_ranks(grouped=True) needs num_groups.')
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f'chunk_size must be positive, got {chunk_size}.')
    if grouped:
        # Ranked over groups: the gallery of every block is the groups 0..num_groups-1.
        rows, cols = positive_pairs(query_group, torch.arange(num_groups))
        chunk = chunk_size or default_chunk_size(max(gallery_group.shape[0], num_groups))
    else:
        rows, cols = positive_pairs(query_group, gallery_group)
        chunk = chunk_size or default_chunk_size(gallery_group.shape[0])
    ranks = []
    for start in range(0, query_group.shape[0], chunk):
        block = block_scores(start, min(start + chunk, query_group.shape[0]))
        if grouped:
            block = group_max_scores(block, gallery_group, num_groups)
        # rows is sorted, so this chunk's pairs are one contiguous run.
        first, last = torch.searchsorted(rows, torch.tensor([start, start + block.shape[0]]))
        ranks.append(ranks_from_pairs(block, rows[first:last] - start, cols[first:last]))
    if not ranks:
        return torch.zeros(0, dtype=torch.long)
    return torch.cat(ranks)


class FaissSearcher:
    """Top-k inner-product search over a fixed gallery with faiss.

    ``index='flat'`` (default) is exact (``IndexFlatIP``). ``'ivf'`` (``IndexIVFFlat``: ``nlist``
    k-means cells, ``nprobe`` of them visited per query) and ``'hnsw'`` (``IndexHNSWFlat``: graph
    with ``hnsw_m`` links per node, ``ef_search`` candidates per query) are approximate: faster
    on large galleries, and may miss true neighbours.

    Args:
        gallery: ``[G, E]`` gallery embeddings (L2-normalised for cosine similarity).
        index: ``'flat'``, ``'ivf'`` or ``'hnsw'``.
        ids: optional ``G`` identifiers (media ids) returned by :meth:`search_ids`.
        chunk_size: queries per faiss call; bounds the memory of one call.
        nlist: IVF cells; ``None`` picks ``4 * sqrt(G)``, at most ``G // 39`` so each cell gets
            the 39 training points faiss asks for.
        nprobe: IVF cells visited per query.
        train_size: IVF k-means training points, sampled from the gallery with ``seed``;
            ``None`` uses ``min(G, 256 * nlist)``.
        hnsw_m: HNSW links per node.
        ef_construction: HNSW candidate list while building.
        ef_search: HNSW candidate list while searching (raised to ``k`` when smaller).
        seed: seed of the IVF training sample and of faiss's k-means.
    """

    def __init__(self, gallery: Tensor | np.ndarray, index: str = 'flat',
                 ids: Sequence[str] | None = None, chunk_size: int = 4096,
                 nlist: int | None = None, nprobe: int = 16, train_size: int | None = None,
                 hnsw_m: int = 32, ef_construction: int = 200, ef_search: int = 128,
                 seed: int = 0) -> None:
        if index not in INDEX_TYPES:
            raise ValueError(f"index must be one of {INDEX_TYPES}, got '{index}'.")
        vectors = _as_float32(gallery, 'gallery')
        if vectors.shape[0] == 0:
            raise ValueError('the gallery is empty: nothing to search.')
        if ids is not None and len(ids) != vectors.shape[0]:
            raise ValueError(f'ids has {len(ids)} entries for a gallery of {vectors.shape[0]}.')
        _check_counts(dict(chunk_size=chunk_size, nlist=nlist, nprobe=nprobe,
                           train_size=train_size, hnsw_m=hnsw_m,
                           ef_construction=ef_construction, ef_search=ef_search, seed=seed))
        self.index_type = index
        self.ids = list(ids) if ids is not None else None
        self.chunk_size = chunk_size
        self.dim = vectors.shape[1]
        self.ef_search = ef_search
        self.index = self._build(vectors, nlist, nprobe, train_size, hnsw_m, ef_construction,
                                 seed)

    @property
    def gallery_size(self) -> int:
        return int(self.index.ntotal)

    def state_dict(self) -> dict[str, Any]:
        """The searcher as plain data, its faiss index serialised (``uint8 [N]``): what
        :meth:`from_state_dict` rebuilds and a weights-only ``torch.load`` reads."""
        return dict(index_type=self.index_type, ids=self.ids, chunk_size=self.chunk_size,
                    ef_search=self.ef_search,
                    index=torch.from_numpy(faiss.serialize_index(self.index)))

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> FaissSearcher:
        """The searcher :meth:`state_dict` wrote: the same index (an approximate one is not
        trained again, so it returns what it returned)."""
        searcher = cls.__new__(cls)
        searcher.index_type, searcher.ids = state['index_type'], state['ids']
        searcher.chunk_size, searcher.ef_search = state['chunk_size'], state['ef_search']
        searcher.index = faiss.deserialize_index(state['index'].numpy())
        searcher.dim = searcher.index.d
        return searcher

    def add(self, gallery: Tensor | np.ndarray, ids: Sequence[str] | None = None) -> None:
        """Append items to the gallery: rows ``gallery_size ...`` on. An IVF index puts them in
        the cells it was trained on (not trained again); HNSW links them into its graph.

        Args:
            gallery: ``[N, E]`` embeddings of the new items.
            ids: their ``N`` ids; given exactly when the searcher has ids.
        """
        vectors = _as_float32(gallery, 'gallery')
        if vectors.shape[1] != self.dim:
            raise ValueError(f'added items have dimension {vectors.shape[1]}, the gallery '
                             f'{self.dim}.')
        if (ids is None) != (self.ids is None):
            raise ValueError('give ids for the added items exactly when the searcher has ids.')
        if ids is not None and len(ids) != vectors.shape[0]:
            raise ValueError(f'ids has {len(ids)} entries for {vectors.shape[0]} added items.')
        self.index.add(vectors)
        if ids is not None:
            self.ids += list(ids)

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only the gallery items of ``rows``, in that order: a flat index given its rows
        in order drops the others in place (faiss's ``remove_ids``, no copy of the gallery);
        any other is emptied and their vectors added again (an IVF index keeps the cells it
        was trained on; HNSW links them anew, with its own settings: as long as a build).

        Raises:
            ValueError: no rows (a gallery cannot be empty), or one out of range.
        """
        rows = list(rows)
        if not rows:
            raise ValueError('keep() would leave the gallery empty: nothing to search.')
        if not all(0 <= row < self.gallery_size for row in rows):
            raise ValueError(f'rows must be in [0, {self.gallery_size}), got '
                             f'{[row for row in rows if not 0 <= row < self.gallery_size][:10]}.')
        if self.index_type == 'flat' and all(a < b for a, b in zip(rows, rows[1:])):
            dropped = np.ones(self.gallery_size, dtype=bool)
            dropped[rows] = False
            self.index.remove_ids(np.flatnonzero(dropped).astype(np.int64))
        else:
            if self.index_type == 'ivf':
                self.index.make_direct_map()  # an IVF index reconstructs its vectors with it
            vectors = self.index.reconstruct_n(0, self.gallery_size)[rows]
            index = faiss.clone_index(self.index)
            index.reset()
            index.add(vectors)
            self.index = index
        if self.ids is not None:
            self.ids = [self.ids[row] for row in rows]

    def tune(self, **options: int) -> None:
        """Set the options a built index searches with: ``chunk_size`` and
        :data:`SEARCH_TIME_OPTIONS`, ``nprobe`` (IVF; at most its ``nlist``) and ``ef_search``
        (HNSW), which trade speed for recall on a saved index without building it again.

        Raises:
            ValueError: an option of another index type (:func:`check_search_options`), one
                its index takes only as it is built, or a count that is not a positive integer.
        """
        accepted = ('chunk_size', *SEARCH_TIME_OPTIONS[self.index_type])
        check_search_options(dict(index=self.index_type, **options))
        built = sorted(set(options) - set(accepted))
        if built:
            raise ValueError(f'options {built} shape the {self.index_type} index as it is '
                             f'built; a built one takes {accepted}.')
        if 'nprobe' in options:
            self.index.nprobe = min(options['nprobe'], self.index.nlist)
        self.ef_search = options.get('ef_search', self.ef_search)
        self.chunk_size = options.get('chunk_size', self.chunk_size)

    def search(self, queries: Tensor | np.ndarray, k: int) -> tuple[Tensor, Tensor]:
        """The ``k`` best gallery items of every query.

        Args:
            queries: ``[Q, E]`` query embeddings.
            k: neighbours per query, at most the gallery size.

        Returns:
            ``scores [Q, k]`` float32 inner products in decreasing order and ``indices [Q, k]``
            int64 gallery rows (``-1`` where an approximate index found fewer than ``k``).
        """
        if not 1 <= k <= self.gallery_size:
            raise ValueError(f'k must be in [1, {self.gallery_size}] (the gallery size), got {k}.')
        vectors = _as_float32(queries, 'queries')
        if vectors.shape[1] != self.dim:
            raise ValueError(f'queries have dimension {vectors.shape[1]}, the gallery {self.dim}.')
        if self.index_type == 'hnsw':
            self.index.hnsw.efSearch = max(self.ef_search, k)
        scores = np.empty((vectors.shape[0], k), dtype=np.float32)
        indices = np.empty((vectors.shape[0], k), dtype=np.int64)
        for start in range(0, vectors.shape[0], self.chunk_size):
            stop = start + self.chunk_size
            scores[start:stop], indices[start:stop] = self.index.search(vectors[start:stop], k)
        return torch.from_numpy(scores), torch.from_numpy(indices)

    def search_ids(self, queries: Tensor | np.ndarray,
                   k: int) -> tuple[Tensor, list[list[str | None]]]:
        """Like :meth:`search`, with gallery rows replaced by their ids (``None`` for ``-1``)."""
        if self.ids is None:
            raise ValueError('this FaissSearcher was built without ids; pass ids=[...] to get '
                             'media ids back.')
        scores, indices = self.search(queries, k)
        named = [[self.ids[i] if i >= 0 else None for i in row] for row in indices.tolist()]
        return scores, named

    def _build(self, vectors: np.ndarray, nlist: int | None, nprobe: int,
               train_size: int | None, hnsw_m: int, ef_construction: int,
               seed: int) -> faiss.Index:
        size, dim = vectors.shape
        if self.index_type == 'flat':
            index = faiss.IndexFlatIP(dim)
        elif self.index_type == 'hnsw':
            index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = ef_construction
        else:
            cells = nlist or max(1, min(round(4 * math.sqrt(size)), size // 39))
            if not 1 <= cells <= size:
                raise ValueError(f'nlist must be in [1, {size}] (the gallery size), got {cells}.')
            quantizer = faiss.IndexFlatIP(dim)
            index = faiss.IndexIVFFlat(quantizer, dim, cells, faiss.METRIC_INNER_PRODUCT)
            index.cp.seed = seed
            sample_size = min(size, train_size or 256 * cells)
            _check_training_rows(sample_size, cells)
            if sample_size < size:
                rows = np.random.default_rng(seed).choice(size, sample_size, replace=False)
                index.train(vectors[np.sort(rows)])
            else:
                # The default trains on every row up to ~1M (256 * 4 * sqrt(G) >= G): indexing
                # them all would copy the gallery (2 GiB at 1M x 512) just to train.
                index.train(vectors)
            index.nprobe = min(nprobe, cells)
            # The quantizer belongs to the index; keep Python from freeing it under faiss.
            self._quantizer = quantizer
        index.add(vectors)
        return index


def _as_float32(array: Tensor | np.ndarray, name: str) -> np.ndarray:
    if isinstance(array, Tensor):
        array = array.detach().cpu().float().numpy()
    array = np.ascontiguousarray(array, dtype=np.float32)
    if array.ndim != 2:
        raise ValueError(f'{name} must be a [N, E] matrix, got shape {array.shape}.')
    return array


def _check_pair(queries: Tensor, gallery: Tensor) -> None:
    if queries.dim() != 2 or gallery.dim() != 2 or queries.shape[1] != gallery.shape[1]:
        raise ValueError(f'queries [Q, E] and gallery [G, E] must share E, got '
                         f'{tuple(queries.shape)} and {tuple(gallery.shape)}.')
    if gallery.shape[0] == 0:
        raise ValueError('the gallery is empty: nothing to rank against.')
