"""faiss search against brute force, chunking, approximate indexes, exact chunked ranks."""
import re
import tracemalloc

import faiss
import numpy as np
import pytest
import torch

from xmr.evaluation import search
from xmr.evaluation.ranking import (
    grouped_ranks_from_scores,
    media_to_text_ranks,
    ranks_from_scores,
    text_to_media_ranks,
)
from xmr.evaluation.search import FaissSearcher, default_chunk_size, exact_ranks


def _unit(rows: torch.Tensor) -> torch.Tensor:
    return rows / rows.norm(dim=1, keepdim=True)


def _random_unit(count: int, dim: int, seed: int) -> torch.Tensor:
    return _unit(torch.randn(count, dim, generator=torch.Generator().manual_seed(seed)))


def _clustered(count: int, dim: int, clusters: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(clusters, dim, generator=generator)
    members = torch.randint(0, clusters, (count,), generator=generator)
    return _unit(centres[members] + 0.3 * torch.randn(count, dim, generator=generator))


def test_flat_search_equals_brute_force_topk():
    gallery, queries = _random_unit(500, 32, 0), _random_unit(60, 32, 1)
    scores, indices = FaissSearcher(gallery).search(queries, 10)
    reference_scores, reference_indices = (queries @ gallery.T).topk(10, dim=1)
    assert torch.equal(indices, reference_indices)
    torch.testing.assert_close(scores, reference_scores, atol=1e-5, rtol=0)


def test_chunked_search_equals_unchunked():
    gallery, queries = _random_unit(300, 16, 2), _random_unit(53, 16, 3)
    whole = FaissSearcher(gallery, chunk_size=1000).search(queries, 7)
    chunked = FaissSearcher(gallery, chunk_size=7).search(queries, 7)
    assert torch.equal(whole[1], chunked[1])
    assert torch.equal(whole[0], chunked[0])


@pytest.mark.parametrize('index, options', [
    ('ivf', dict(nlist=20, nprobe=4)),
    ('hnsw', dict(hnsw_m=16, ef_search=64)),
])
def test_approximate_indexes_find_most_exact_neighbours(index, options):
    data = _clustered(2100, 32, clusters=20, seed=4)
    gallery, queries = data[:2000], data[2000:]
    _, exact = FaissSearcher(gallery).search(queries, 10)
    _, approximate = FaissSearcher(gallery, index=index, **options).search(queries, 10)
    overlap = sum(len(set(a.tolist()) & set(e.tolist())) for a, e in zip(approximate, exact))
    assert overlap / exact.numel() >= 0.9


def test_ivf_probing_every_cell_is_exact_and_nprobe_is_the_indexs():
    """With nprobe = nlist every cell is searched: the IVF top-k is the flat one."""
    data = _random_unit(560, 16, 6)
    gallery, queries = data[:500], data[500:]
    _, exact = FaissSearcher(gallery).search(queries, 10)
    every = FaissSearcher(gallery, index='ivf', nlist=8, nprobe=8)
    assert every.index.nprobe == 8
    assert torch.equal(every.search(queries, 10)[1], exact)
    one = FaissSearcher(gallery, index='ivf', nlist=8, nprobe=1)
    assert one.index.nprobe == 1 and not torch.equal(one.search(queries, 10)[1], exact)


def test_ivf_picks_a_trainable_default_nlist():
    searcher = FaissSearcher(_random_unit(400, 8, 5), index='ivf')
    assert searcher.index.nlist == 400 // 39
    # 780 points train 20 cells of 39 (// 40 would give 19).
    assert FaissSearcher(_random_unit(780, 8, 5), index='ivf').index.nlist == 20


def test_ivf_default_nlist_of_a_large_gallery_is_four_square_roots():
    # 40,000 points: 4 * 200 = 800 cells, below the 1,025 that 39 points a cell allow.
    searcher = FaissSearcher(_random_unit(40_000, 2, 5), index='ivf', train_size=1000)
    assert searcher.index.nlist == 800


def test_ivf_trains_on_train_size_points(monkeypatch):
    trained = []

    class RecordingIVF(faiss.IndexIVFFlat):
        def train(self, vectors):
            trained.append(vectors.shape[0])
            super().train(vectors)

    monkeypatch.setattr(faiss, 'IndexIVFFlat', RecordingIVF)
    FaissSearcher(_random_unit(400, 8, 5), index='ivf', nlist=4, train_size=100)
    FaissSearcher(_random_unit(400, 8, 5), index='ivf', nlist=4)
    assert trained == [100, 400]  # the default min(G, 256 * nlist)


def test_ivf_seed_seeds_the_k_means():
    """The whole gallery is the training sample whatever the seed, so only faiss's k-means
    seed can move the cell centres."""
    gallery = _random_unit(400, 8, 5)

    def centres(seed):
        searcher = FaissSearcher(gallery, index='ivf', nlist=8, train_size=400, seed=seed)
        return torch.from_numpy(searcher.index.quantizer.reconstruct_n(0, 8))

    assert torch.equal(centres(1), centres(1))
    assert not torch.equal(centres(0), centres(1))


def test_search_ids_returns_media_ids():
    gallery = torch.eye(3)
    searcher = FaissSearcher(gallery, ids=['a', 'b', 'c'])
    scores, ids = searcher.search_ids(torch.tensor([[0.0, 0.6, 0.8]]), 2)
    assert ids == [['c', 'b']]
    torch.testing.assert_close(scores, torch.tensor([[0.8, 0.6]]))


def test_search_errors_name_the_problem():
    with pytest.raises(ValueError, match='empty'):
        FaissSearcher(torch.zeros(0, 4))
    with pytest.raises(ValueError, match='ids has 2 entries'):
        FaissSearcher(torch.eye(3), ids=['a', 'b'])
    searcher = FaissSearcher(torch.eye(3))
    with pytest.raises(ValueError, match=r'k must be in \[1, 3\]'):
        searcher.search(torch.eye(3), 4)
    with pytest.raises(ValueError, match='dimension 2'):
        searcher.search(torch.ones(1, 2), 1)
    with pytest.raises(ValueError, match='without ids'):
        searcher.search_ids(torch.eye(3), 1)
    with pytest.raises(ValueError, match="'annoy'"):
        FaissSearcher(torch.eye(3), index='annoy')
    # faiss aborts the process on a graph without links, and ignored nlist=0.
    with pytest.raises(ValueError, match='hnsw_m must be an integer >= 1, got 0'):
        FaissSearcher(torch.eye(3), index='hnsw', hnsw_m=0)
    with pytest.raises(ValueError, match='nlist must be an integer >= 1, got 0'):
        FaissSearcher(torch.eye(3), index='ivf', nlist=0)


def test_exact_ranks_chunked_equal_full_matrix_with_exact_ties():
    # Small integer entries make every inner product exact, so ties survive any blocking.
    generator = torch.Generator().manual_seed(6)
    media = torch.randint(-2, 3, (12, 5), generator=generator).float()
    captions = torch.randint(-2, 3, (40, 5), generator=generator).float()
    owners = torch.cat([torch.arange(12), torch.randint(0, 12, (28,), generator=generator)])
    scores = captions @ media.T
    assert (scores.unsqueeze(2) == scores.unsqueeze(1)).sum() > scores.numel()  # ties exist
    t2i_full = text_to_media_ranks(scores, owners)
    i2t_full = media_to_text_ranks(scores.T, owners)
    grouped_full = media_to_text_ranks(scores.T, owners, grouped=True)
    media_rows = torch.arange(12)
    for chunk in (1, 5, 40):
        assert torch.equal(exact_ranks(captions, media, owners, media_rows, chunk_size=chunk),
                           t2i_full)
        assert torch.equal(exact_ranks(media, captions, media_rows, owners, chunk_size=chunk),
                           i2t_full)
        assert torch.equal(exact_ranks(media, captions, media_rows, owners, grouped=True,
                                       num_groups=12, chunk_size=chunk), grouped_full)


def test_exact_ranks_match_the_pure_functions_on_random_data():
    queries, gallery = _random_unit(70, 16, 7), _random_unit(90, 16, 8)
    query_group = torch.randint(0, 90, (70,), generator=torch.Generator().manual_seed(9))
    gallery_group = torch.arange(90)
    full = ranks_from_scores(queries @ gallery.T, query_group, gallery_group)
    assert torch.equal(exact_ranks(queries, gallery, query_group, gallery_group, chunk_size=9),
                       full)
    grouped = grouped_ranks_from_scores(queries @ gallery.T, query_group, gallery_group, 90)
    assert torch.equal(grouped, full)  # one item per group: grouping changes nothing


def test_default_chunk_keeps_blocks_bounded():
    assert default_chunk_size(1_000_000) * 1_000_000 <= 2 ** 26
    assert default_chunk_size(10) == 2 ** 26 // 10
    # A gallery past the budget still moves one query per block (a chunk of 0 never ends).
    assert default_chunk_size(10, block_elements=3) == 1


def test_exact_ranks_argument_errors():
    with pytest.raises(ValueError, match='share E'):
        exact_ranks(torch.ones(2, 3), torch.ones(2, 4), torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError, match=r'need query_group \[2\]'):
        exact_ranks(torch.ones(2, 3), torch.ones(2, 3), torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match='num_groups'):
        exact_ranks(torch.ones(2, 3), torch.ones(2, 3), torch.zeros(2), torch.zeros(2),
                    grouped=True)
    with pytest.raises(ValueError, match='chunk_size'):
        exact_ranks(torch.ones(2, 3), torch.ones(2, 3), torch.zeros(2), torch.zeros(2),
                    chunk_size=0)


@pytest.mark.parametrize('index, options', [('ivf', dict(nlist=4, nprobe=4)),
                                            ('hnsw', dict(ef_search=64))])
def test_approximate_indexes_return_inner_products_in_decreasing_order(index, options):
    """Every index scores by inner product (the cosine), not by an L2 distance: the scores are
    each query's dot product with the returned rows, best first."""
    gallery, queries = _random_unit(200, 16, 8), _random_unit(12, 16, 9)
    scores, indices = FaissSearcher(gallery, index=index, **options).search(queries, 5)
    expected = (queries[:, None, :] * gallery[indices]).sum(dim=-1)
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=0)
    assert bool((scores[:, :-1] >= scores[:, 1:]).all())


def test_hnsw_candidate_list_grows_to_k():
    """ef_search below k would leave most of each list empty (-1); the searcher raises it to k."""
    gallery = _random_unit(300, 16, 10)
    _, indices = FaissSearcher(gallery, index='hnsw', ef_search=1).search(gallery[:5], 100)
    assert bool((indices >= 0).all())
    assert all(len(set(row.tolist())) == 100 for row in indices)


def test_search_ids_names_empty_slots_none():
    """IVF probing one of two far-apart cells finds 3 items for k = 5: the last two slots are
    empty (-1), which search_ids reports as None, not as the gallery's last id."""
    gallery = _unit(torch.tensor([[1, 0.], [0.99, 0.141], [0.98, 0.199],
                                  [-1, 0], [-0.99, 0.141], [-0.98, 0.199]]))
    searcher = FaissSearcher(gallery, index='ivf', nlist=2, nprobe=1, ids=list('abcdef'))
    _, indices = searcher.search(gallery[:1], 5)
    assert indices.tolist() == [[0, 1, 2, -1, -1]]
    _, named = searcher.search_ids(gallery[:1], 5)
    assert named == [['a', 'b', 'c', None, None]]


def test_chunked_flat_search_fills_every_row_like_brute_force():
    # 53 queries in chunks of 7: the last row of every chunk and the short last chunk included.
    gallery, queries = _random_unit(300, 16, 4), _random_unit(53, 16, 5)
    scores, indices = FaissSearcher(gallery, chunk_size=7).search(queries, 5)
    reference_scores, reference_indices = (queries @ gallery.T).topk(5, dim=1)
    assert torch.equal(indices, reference_indices)
    torch.testing.assert_close(scores, reference_scores, atol=1e-5, rtol=0)


def test_exact_ranks_of_no_queries_are_empty():
    ranks = exact_ranks(torch.zeros(0, 3), torch.eye(3), torch.zeros(0, dtype=torch.long),
                        torch.arange(3))
    assert ranks.dtype == torch.long and ranks.shape == (0,)


def test_grouped_blocks_are_sized_by_the_item_gallery_not_the_groups(monkeypatch):
    # A budget of 12 scores per block: 6 captions in 3 groups -> 2 queries per [q, 6] block
    # (sizing by the 3 groups would give 4 queries, 24 raw scores).
    monkeypatch.setattr(search, 'default_chunk_size', lambda gallery_size: 12 // gallery_size)
    owners = torch.tensor([0, 0, 1, 1, 2, 2])
    scores = torch.rand(5, 6, generator=torch.Generator().manual_seed(10))
    blocks = []

    def block(start, stop):
        blocks.append((start, stop))
        return scores[start:stop]

    ranks = search.blockwise_ranks(block, torch.tensor([0, 1, 2, 0, 1]), owners, grouped=True,
                                   num_groups=3)
    assert blocks == [(0, 2), (2, 4), (4, 5)]
    assert torch.equal(ranks, grouped_ranks_from_scores(scores, torch.tensor([0, 1, 2, 0, 1]),
                                                        owners, 3))


def test_ivf_training_sample_smaller_than_its_cells_is_named_by_its_options():
    """faiss stopped in its C++ k-means ("Number of training points (50) should be at least as
    large as number of clusters (100)"), naming neither option; the defaults' 4,000 cells at
    1M need a train_size of at least that."""
    gallery = _random_unit(1000, 8, 8)
    with pytest.raises(ValueError, match=r'train_size 50 is smaller than nlist 100.*raise '
                       'train_size or lower nlist'):
        FaissSearcher(gallery, index='ivf', nlist=100, train_size=50)
    # Both given: refused as the options are checked, before a gallery is encoded.
    with pytest.raises(ValueError, match=r'train_size 50 is smaller than nlist 100'):
        search.check_search_options(dict(index='ivf', nlist=100, train_size=50))


def test_ivf_trained_on_the_whole_gallery_does_not_copy_it():
    """The default train_size (256 * nlist) covers every row of galleries up to ~1M; a sample
    that is the whole gallery is trained on in place, not copied first."""
    gallery = np.ascontiguousarray(_random_unit(4000, 32, 7).numpy())
    tracemalloc.start()
    try:
        searcher = FaissSearcher(gallery, index='ivf')
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 256 * searcher.index.nlist >= len(gallery)
    assert peak < gallery.nbytes / 4


@pytest.mark.parametrize('index, options', [('flat', {}), ('ivf', dict(nlist=4, nprobe=4)),
                                            ('hnsw', {})])
def test_items_added_are_found_as_if_built_with_the_gallery(index, options):
    gallery, queries = _random_unit(300, 16, seed=3), _random_unit(20, 16, seed=4)
    ids = [f'm{row}' for row in range(300)]
    whole = FaissSearcher(gallery, index=index, ids=ids, **options)
    grown = FaissSearcher(gallery[:200], index=index, ids=ids[:200], **options)
    grown.add(gallery[200:], ids[200:])
    assert grown.gallery_size == 300 and grown.ids == ids
    exact_scores, exact_rows = (queries @ gallery.T).topk(5)
    for searcher in (whole, grown):
        scores, named = searcher.search_ids(queries, 5)
        assert named == [[ids[row] for row in rows] for rows in exact_rows.tolist()]
        torch.testing.assert_close(scores, exact_scores, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match='give ids for the added items exactly when'):
        grown.add(gallery[:1])
    with pytest.raises(ValueError, match='ids has 2 entries for 1 added items'):
        grown.add(gallery[:1], ['a', 'b'])


@pytest.mark.parametrize('index, options', [('flat', {}), ('ivf', dict(nlist=4, nprobe=4)),
                                            ('hnsw', {})])
def test_a_searcher_kept_to_some_rows_finds_as_one_built_of_them(index, options):
    gallery, queries = _random_unit(300, 16, seed=3), _random_unit(20, 16, seed=4)
    ids = [f'm{row}' for row in range(300)]
    rows = [row for row in range(300) if row % 3]
    searcher = FaissSearcher(gallery, index=index, ids=ids, **options)
    nprobe = searcher.index.nprobe if index == 'ivf' else None
    searcher.keep(rows)
    assert searcher.gallery_size == 200 and searcher.ids == [ids[row] for row in rows]
    if index == 'ivf':  # the trained cells and their probing kept
        assert (searcher.index.nlist, searcher.index.nprobe) == (4, nprobe)
    exact_scores, exact_rows = (queries @ gallery[rows].T).topk(5)
    scores, named = searcher.search_ids(queries, 5)
    assert named == [[ids[rows[row]] for row in found] for found in exact_rows.tolist()]
    torch.testing.assert_close(scores, exact_scores, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match='keep\\(\\) would leave the gallery empty'):
        searcher.keep([])
    with pytest.raises(ValueError, match=r'rows must be in \[0, 200\), got \[200\]'):
        searcher.keep([0, 200])


@pytest.mark.parametrize('order', ['ascending', 'reordered'])
def test_a_flat_searcher_keeps_rows_in_order_in_place_and_others_in_their_order(order):
    """Dropping one file from a 400k flat gallery copied it whole twice (6.1 s, +2x memory):
    rows in order are dropped in place; rows in another order are kept in that order."""
    gallery, queries = _random_unit(50, 8, seed=5), _random_unit(6, 8, seed=6)
    ids = [f'm{row}' for row in range(50)]
    rows = [row for row in range(50) if row not in (0, 17, 49)]
    if order == 'reordered':
        rows = rows[::-1]
    searcher = FaissSearcher(gallery, index='flat', ids=ids)
    built = searcher.index
    searcher.keep(rows)
    assert (searcher.index is built) == (order == 'ascending')
    assert searcher.ids == [ids[row] for row in rows]
    torch.testing.assert_close(torch.from_numpy(searcher.index.reconstruct_n(0, 47)),
                               gallery[rows])
    exact_scores, exact_rows = (queries @ gallery[rows].T).topk(4)
    scores, named = searcher.search_ids(queries, 4)
    assert named == [[ids[rows[row]] for row in found] for found in exact_rows.tolist()]
    torch.testing.assert_close(scores, exact_scores, rtol=0, atol=1e-5)


@pytest.mark.parametrize('index, options', [('ivf', dict(nlist=8, nprobe=1)),
                                            ('hnsw', dict(hnsw_m=4, ef_search=2))])
def test_a_searcher_s_state_is_its_index_not_one_built_again(index, options):
    """Small probes and candidate lists miss neighbours: the loaded searcher misses the ones
    the built one missed. A gallery of five media found everything whatever the graph, so a
    graph built again on load passed as the saved one."""
    gallery, queries = _random_unit(400, 16, 11), _random_unit(40, 16, 12)
    built = FaissSearcher(gallery, index=index, **options)
    loaded = FaissSearcher.from_state_dict(built.state_dict())
    rebuilt = FaissSearcher(gallery, index=index, **dict(options, seed=5) if index == 'ivf'
                            else dict(options, hnsw_m=2))
    _, exact = FaissSearcher(gallery).search(queries, 5)
    _, found = built.search(queries, 5)
    assert not torch.equal(found, exact)  # the index misses some: its misses are its own
    assert torch.equal(loaded.search(queries, 5)[1], found)
    assert not torch.equal(rebuilt.search(queries, 5)[1], found)


def test_a_loaded_index_is_tuned_to_search_as_one_built_with_those_options():
    """A saved IVF index probed more cells finds what one built probing them finds (every cell:
    the exact top-k); HNSW's candidate list likewise. Build options are refused by name."""
    gallery, queries = _random_unit(400, 16, 13), _random_unit(40, 16, 14)
    _, exact = FaissSearcher(gallery).search(queries, 5)
    ivf = FaissSearcher.from_state_dict(
        FaissSearcher(gallery, index='ivf', nlist=8, nprobe=1).state_dict())
    assert not torch.equal(ivf.search(queries, 5)[1], exact)
    ivf.tune(nprobe=100, chunk_size=3)
    assert (ivf.index.nprobe, ivf.chunk_size) == (8, 3)
    assert torch.equal(ivf.search(queries, 5)[1], exact)
    assert FaissSearcher.from_state_dict(ivf.state_dict()).index.nprobe == 8

    hnsw = FaissSearcher(gallery, index='hnsw', hnsw_m=4, ef_search=5)
    wide = FaissSearcher.from_state_dict(hnsw.state_dict())
    wide.tune(ef_search=400)
    assert torch.equal(wide.search(queries, 5)[1], exact)
    assert not torch.equal(hnsw.search(queries, 5)[1], exact)

    with pytest.raises(ValueError, match=re.escape(
            "options ['nlist', 'train_size'] shape the ivf index as it is built; a built one "
            "takes ('chunk_size', 'nprobe').")):
        ivf.tune(nlist=4, train_size=100, nprobe=2)
    with pytest.raises(ValueError, match=re.escape(
            "search options ['ef_search'] do not apply to index 'ivf'; it takes ('chunk_size', "
            "'nlist', 'nprobe', 'train_size', 'seed').")):
        ivf.tune(ef_search=4)
    with pytest.raises(ValueError, match='search option nprobe must be an integer >= 1, got 0'):
        ivf.tune(nprobe=0)
    assert ivf.index.nprobe == 8


@pytest.mark.parametrize('name, index', [('nprobe', 'ivf'), ('seed', 'ivf'),
                                         ('ef_search', 'hnsw')])
def test_none_is_taken_only_for_an_option_whose_default_is_computed(name, index):
    """``nprobe=None`` passed the early check and failed in min(None, cells) once the gallery
    was encoded."""
    computed = dict(nlist=None, train_size=None) if index == 'ivf' else {}
    search.check_search_options(dict(index=index, chunk_size=None, **computed))
    with pytest.raises(ValueError, match=f'search option {name} must be an integer >= '):
        search.check_search_options({'index': index, name: None})


def test_an_ivf_index_trains_on_as_many_rows_as_it_has_cells():
    search.check_search_options(dict(index='ivf', nlist=4, train_size=4))
    gallery = np.random.default_rng(0).standard_normal((200, 8)).astype('float32')
    assert FaissSearcher(gallery, index='ivf', nlist=4, train_size=4).index.nlist == 4
    with pytest.raises(ValueError, match='train_size'):
        search.check_search_options(dict(index='ivf', nlist=4, train_size=3))
