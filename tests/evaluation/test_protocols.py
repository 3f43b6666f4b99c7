"""Protocols on hand-built galleries: COCO folds, XTD10 split, per-language galleries."""
import numpy as np
import pytest
import torch

from xmr.datasets.annotation import Annotation, MediaRecord
from xmr.datasets.few_shot import few_shot_splits
from xmr.evaluation.protocols import (
    PROTOCOLS,
    LanguageGallery,
    MediaSearchers,
    check_folds,
    check_recall_ks,
    coco_1k_folds,
    evaluate_language,
    evaluate_protocol,
    protocol_galleries,
    ranked_galleries,
    xtd10_fewshot_split,
)
from xmr.evaluation.search import FaissSearcher
from xmr.evaluation.token_scoring import TokenSet


def _gallery_from_scores(scores: torch.Tensor, caption_media: torch.Tensor) -> LanguageGallery:
    """Media are one-hot rows, so caption c scores ``scores[c, m]`` against media m."""
    num_media = scores.shape[1]
    return LanguageGallery(torch.eye(num_media), scores.clone(), caption_media)


def _ten_media_in_five_folds() -> LanguageGallery:
    """One caption per media; folds of 2 consecutive media.

    Folds 0-1: every caption scores 1 on its media, 0 elsewhere. Folds 2-4: caption 2f scores 0.5
    on its media and 0.9 on media 2f+1 (same fold). Caption 0 also scores 1.0 on media 9, a tie
    that only exists in the full 10-media gallery.
    """
    scores = torch.eye(10)
    for fold in (2, 3, 4):
        scores[2 * fold, 2 * fold] = 0.5
        scores[2 * fold, 2 * fold + 1] = 0.9
    scores[0, 9] = 1.0
    return _gallery_from_scores(scores, torch.arange(10))


def test_coco_folds_are_consecutive():
    folds = coco_1k_folds(10, 5)
    assert [f.tolist() for f in folds] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert [len(f) for f in coco_1k_folds(5000)] == [1000] * 5
    with pytest.raises(ValueError, match='11 media'):
        coco_1k_folds(11, 5)


def test_five_fold_averages_each_fold_by_hand():
    gallery = _ten_media_in_five_folds()
    galleries = protocol_galleries('coco_1k_5fold', 10, gallery_size=10)
    result = evaluate_protocol(gallery, galleries, recall_ks=(1, 2))
    # t2i R@1: folds 0-1 100, folds 2-4 50 (caption 2f ranks 2nd) -> mean 70
    assert result['t2i_R@1'] == pytest.approx(70.0)
    assert result['t2i_R@2'] == pytest.approx(100.0)
    # MdR per fold: 1, 1, 1.5, 1.5, 1.5 -> mean 1.3; MnR the same here
    assert result['t2i_MdR'] == pytest.approx(1.3)
    assert result['t2i_MnR'] == pytest.approx(1.3)
    # i2t: media 2f+1's own caption (1.0) beats caption 2f (0.9); every fold 100
    assert result['i2t_R@1'] == pytest.approx(100.0)
    assert result['AR'] == pytest.approx((70 + 100 + 100 + 100) / 4)
    assert result['rSum'] == pytest.approx(370.0)


def test_five_fold_averages_the_folds_not_their_captions():
    """Fold 0 holds four captions, the others two: the mean of the folds' recalls (70) is not
    the recall of the pooled captions (9 of 12 at rank 1, 75)."""
    base = _ten_media_in_five_folds()
    gallery = LanguageGallery(base.media, torch.cat([base.captions, torch.eye(10)[[0, 0]]]),
                              torch.cat([base.caption_media, torch.tensor([0, 0])]))
    result = evaluate_protocol(gallery, protocol_galleries('coco_1k_5fold', 10, gallery_size=10))
    assert result['t2i_R@1'] == pytest.approx(70.0)


def test_full_gallery_sees_cross_fold_confusers():
    gallery = _ten_media_in_five_folds()
    result = evaluate_protocol(gallery, protocol_galleries('standard', 10), recall_ks=(1,))
    # caption 0 ties with media 9 -> rank 2; captions 4, 6, 8 rank 2 -> 6 of 10 at rank 1
    assert result['t2i_R@1'] == pytest.approx(60.0)
    # media 9: caption 0 ties with its own caption -> rank 2
    assert result['i2t_R@1'] == pytest.approx(90.0)


def test_dasd_fold_zero_only():
    gallery = _ten_media_in_five_folds()
    galleries = protocol_galleries('coco_1k_5fold', 10, gallery_size=10, folds=(2,))
    assert [g.tolist() for g in galleries] == [[4, 5]]
    assert evaluate_protocol(gallery, galleries, recall_ks=(1,))['t2i_R@1'] == 50.0


def test_protocol_gallery_sizes_are_enforced():
    with pytest.raises(ValueError, match='defined on 5000 media'):
        protocol_galleries('coco_5k', 4999)
    with pytest.raises(ValueError, match='defined on 1000 media'):
        protocol_galleries('xtd10_t2i_r10', 999)
    assert protocol_galleries('coco_5k', 5000)[0].tolist() == list(range(5000))
    with pytest.raises(ValueError, match='fold 5 does not exist'):
        protocol_galleries('coco_1k_5fold', 5000, folds=(5,))
    with pytest.raises(ValueError, match='name no fold'):
        protocol_galleries('coco_1k_5fold', 5000, folds=())
    with pytest.raises(ValueError, match='unknown protocol'):
        protocol_galleries('flickr', 10)
    with pytest.raises(ValueError, match='empty'):
        protocol_galleries('standard', 0)


def test_xtd10_fewshot_split_is_pectvlm_recipe():
    split = xtd10_fewshot_split()
    perm = torch.randperm(1000, generator=torch.Generator().manual_seed(42)).tolist()
    assert split.train == perm[:50] and split.val == perm[50:100] and split.test == perm[100:]
    assert len(split.test) == 900
    assert sorted(split.train + split.val + split.test) == list(range(1000))
    assert xtd10_fewshot_split(seed=43).train != split.train
    assert protocol_galleries('xtd10_fewshot', 1000)[0].tolist() == split.test
    with pytest.raises(ValueError, match='shots'):
        xtd10_fewshot_split(num_images=10, shots=5)


def test_the_fewshot_metric_scores_the_images_the_converters_split_leaves_out_of_training():
    """docs/evaluation.md: the converter's --few-shot split (the training data) and the
    metric's split are two functions drawing one permutation."""
    images = Annotation(
        dataset='xtd10', split='test', media_type='image', languages=['en'], source_lang='en',
        items=[MediaRecord(str(i), f'{i}.jpg', {'en': [f'caption {i}']}) for i in range(1000)])
    parts = few_shot_splits(images, 50)
    split = xtd10_fewshot_split()
    assert [[int(record.media_id) for record in parts[name].items]
            for name in ('train', 'val', 'test')] == [split.train, split.val, split.test]


def test_text_to_video_one_caption_per_clip():
    scores = torch.tensor([
        [0.9, 0.1, 0.2, 0.3],  # rank 1
        [0.8, 0.7, 0.1, 0.0],  # rank 2
        [0.1, 0.2, 0.3, 0.3],  # tie with clip 3 -> rank 2
        [0.5, 0.6, 0.7, 0.1],  # rank 4
    ])
    result = evaluate_language(_gallery_from_scores(scores, torch.arange(4)),
                               directions=('t2i',), recall_ks=(1, 5, 10))
    assert result == pytest.approx({'t2i_R@1': 25.0, 't2i_R@5': 100.0, 't2i_R@10': 100.0,
                                    't2i_MdR': 2.0, 't2i_MnR': 2.25})


def test_grouped_option_changes_only_i2t_recall_beyond_one():
    # media 0 owns captions 0-1, media 1 owns 2, media 2 owns 3-4 (columns of the i2t matrix)
    caption_media = torch.tensor([0, 0, 1, 2, 2])
    i2t = torch.tensor([[0.2, 0.6, 0.7, 0.1, 0.6],
                        [0.3, 0.3, 0.5, 0.9, 0.8],
                        [0.1, 0.1, 0.1, 0.4, 0.2]])
    gallery = _gallery_from_scores(i2t.T, caption_media)
    standard = evaluate_language(gallery, recall_ks=(1, 2))
    grouped = evaluate_language(gallery, recall_ks=(1, 2), i2t_mode='grouped')
    assert standard['i2t_R@1'] == grouped['i2t_R@1'] == pytest.approx(100 / 3)
    assert standard['i2t_R@2'] == pytest.approx(100 / 3)
    assert grouped['i2t_R@2'] == pytest.approx(200 / 3)
    assert all(standard[k] == grouped[k] for k in standard if k.startswith('t2i'))


def test_restrict_drops_media_without_captions_and_reindexes():
    gallery = LanguageGallery(torch.eye(4), torch.eye(4)[[3, 1, 3]], torch.tensor([3, 1, 3]))
    subset = gallery.restrict(torch.tensor([3, 0, 1]))
    assert torch.equal(subset.media, torch.eye(4)[[3, 1]])
    assert subset.caption_media.tolist() == [0, 1, 0]


def test_restricting_to_every_media_in_order_copies_nothing():
    """The standard protocol's one gallery is every media in order: each language copied the
    media and its captions into a gallery equal to its own (for 100k media and 500k captions
    of 512 floats, 1.2 GB more while a language was ranked)."""
    gallery = LanguageGallery(torch.eye(3), torch.eye(3)[[0, 1, 2, 2]], torch.tensor([0, 1, 2, 2]))
    assert gallery.restrict(torch.arange(3)) is gallery
    reordered = gallery.restrict(torch.tensor([2, 1, 0]))
    assert torch.equal(reordered.media, torch.eye(3)[[2, 1, 0]])
    assert reordered.caption_media.tolist() == [2, 1, 0, 0]


def test_media_searchers_keep_the_index_only_for_the_same_media_and_options():
    """The index is reused only for the very same media tensor searched with the same options:
    an equal copy (another gallery) or other options (another nprobe) build a new one."""
    media = torch.randn(40, 8, generator=torch.Generator().manual_seed(0))
    one_probe = dict(index='ivf', nlist=2, nprobe=1)
    two_probes = dict(one_probe, nprobe=2)
    searchers = MediaSearchers()
    first = searchers.searcher(media, one_probe)
    assert searchers.searcher(media, dict(one_probe)) is first
    other_options = searchers.searcher(media, two_probes)
    assert other_options is not first
    assert searchers.searcher(media.clone(), two_probes) is not other_options


def test_language_absent_from_a_fold_is_an_error():
    gallery = LanguageGallery(torch.eye(4), torch.eye(4)[:1], torch.tensor([0]))
    with pytest.raises(ValueError, match='gallery 1'):
        evaluate_protocol(gallery, coco_1k_folds(4, 2))


def test_approximate_search_gives_recalls_without_mean_ranks():
    generator = torch.Generator().manual_seed(0)
    media = torch.randn(300, 16, generator=generator)
    media = media / media.norm(dim=1, keepdim=True)
    captions = media + 0.05 * torch.randn(300, 16, generator=generator)
    captions = captions / captions.norm(dim=1, keepdim=True)
    gallery = LanguageGallery(media, captions, torch.arange(300))
    exact = evaluate_language(gallery)
    approximate = evaluate_language(gallery, search=dict(index='hnsw'))
    assert 't2i_MdR' in exact and 't2i_MdR' not in approximate
    for key in ('t2i_R@1', 't2i_R@10', 'i2t_R@1', 'i2t_R@10'):
        assert approximate[key] == pytest.approx(exact[key], abs=2.0)


def test_bad_options_are_errors():
    gallery = _gallery_from_scores(torch.eye(2), torch.arange(2))
    with pytest.raises(ValueError, match='directions'):
        evaluate_language(gallery, directions=('v2t',))
    with pytest.raises(ValueError, match='recall_ks'):
        evaluate_language(gallery, recall_ks=(0,))
    with pytest.raises(ValueError, match='repeat 5'):
        evaluate_language(gallery, recall_ks=(1, 5, 5))
    with pytest.raises(ValueError, match='i2t_mode'):
        evaluate_language(gallery, i2t_mode='lenient')
    with pytest.raises(ValueError, match='search index'):
        evaluate_language(gallery, search=dict(index='lsh'))
    with pytest.raises(ValueError, match=r"\['nprobe'\] do not apply to index 'flat'"):
        evaluate_language(gallery, search=dict(index='flat', nprobe=4))


def test_approximate_grouped_i2t_searches_deep_enough_for_other_media_caption_runs():
    """Grouped i2t on an exhaustive index (IVF with one cell) must give the exact recalls: media 0
    meets both captions of media 1, then media 2's, before its own, so its grouped rank is 3; a
    top-k list of only max(K) = 2 captions would hold media 1 alone and read rank 2 (a false
    R@2 hit)."""
    def unit(*values: float) -> list[float]:
        row = torch.tensor(values)
        return (row / row.norm()).tolist()

    media = torch.eye(4)[[0, 2, 3]]
    captions = torch.tensor([unit(0.9, 0, 0.436, 0), unit(0.8, 0, 0.6, 0),  # media 1
                             unit(0.7, 0, 0, 0.714),                         # media 2
                             unit(0.6, 0.8, 0, 0)])                          # media 0
    gallery = LanguageGallery(media, captions, torch.tensor([1, 1, 2, 0]))
    options = dict(directions=('i2t',), recall_ks=(1, 2), i2t_mode='grouped')
    exact = evaluate_language(gallery, **options)
    approximate = evaluate_language(gallery, search=dict(index='ivf', nlist=1), **options)
    assert exact['i2t_R@2'] == pytest.approx(200 / 3)  # media 1 and 2 first, media 0 third
    assert approximate['i2t_R@1'] == pytest.approx(200 / 3)
    assert approximate['i2t_R@2'] == pytest.approx(200 / 3)


def test_default_directions_are_those_of_the_documented_protocol_table():
    # docs/evaluation.md, "Protocols": only text->video and XTD10's M-CLIP convention score
    # one direction; every other protocol both (text_to_text names them t2s / s2t).
    both = ('t2i', 'i2t')
    assert {name: protocol.directions for name, protocol in PROTOCOLS.items()} == {
        'standard': both, 'coco_5k': both, 'coco_1k_5fold': both, 'text_to_video': ('t2i',),
        'xtd10_t2i_r10': ('t2i',), 'xtd10_fewshot': both, 'crossmodal3600': both,
        'crossmodal3600_first_caption': both, 'xtd200': both, 'flickr30k_200': both,
        'text_to_text': both}


def test_approximate_recall_counts_only_the_positives_the_search_returned():
    """IVF probing one of many small cells returns fewer than k items (faiss fills the rest of
    the list with -1). R@K of the approximate search is, by definition, the share of queries
    whose own media is among the first K items the search returned; queries whose media was not
    returned are misses, however short their list."""
    generator = torch.Generator().manual_seed(0)
    media = torch.nn.functional.normalize(torch.randn(400, 16, generator=generator), dim=1)
    captions = torch.nn.functional.normalize(
        media + 0.8 * torch.randn(400, 16, generator=generator), dim=1)
    options = dict(index='ivf', nlist=100, nprobe=1)
    scores = evaluate_language(LanguageGallery(media, captions, torch.arange(400)),
                               directions=('t2i',), search=options)
    _, indices = FaissSearcher(media, **options).search(captions, 10)
    assert bool((indices == -1).any())   # the case under test: lists with empty slots
    for k in (1, 5, 10):
        returned = (indices[:, :k] == torch.arange(400)[:, None]).any(dim=1)
        assert scores[f't2i_R@{k}'] == pytest.approx(100 * returned.double().mean().item())


@pytest.mark.parametrize('index', ['flat', 'ivf', 'hnsw'])
def test_embeddings_with_nan_are_refused_whatever_the_search(index):
    """faiss searches a NaN query without complaint and returns some list; the ranks read from
    it would be counted. The gallery refuses non-finite embeddings before any search."""
    media = torch.eye(4)
    captions = torch.eye(4)
    captions[2, 0] = float('nan')
    with pytest.raises(ValueError, match='NaN or inf'):
        evaluate_language(LanguageGallery(media, captions, torch.arange(4)),
                          search=dict(index=index))



def test_a_negative_fold_is_refused_not_read_from_the_end():
    # all_folds[-1] is fold 4: folds=(-1,) would silently average the last fold.
    with pytest.raises(ValueError, match=r'fold -1 does not exist; folds are 0..4'):
        protocol_galleries('coco_1k_5fold', 5000, folds=(-1,))


def test_a_caption_of_a_media_one_past_the_last_row_is_refused():
    with pytest.raises(ValueError, match='caption_media must index the 2 media rows'):
        LanguageGallery(torch.eye(2), torch.eye(2), torch.tensor([0, 2]))


def test_approximate_recall_at_k_beyond_a_small_gallery_counts_every_item():
    """Four media and R@10: the search returns the whole gallery (not k = 10 items, which faiss
    cannot give), so R@5 and R@10 hold every query. Caption 0 scores 0.5 on media 1 and 0.4 on
    media 2 before its own 0.1 -> rank 3; the others rank 1."""
    scores = torch.eye(4)
    scores[0] = torch.tensor([0.1, 0.5, 0.4, 0.0])
    result = evaluate_language(_gallery_from_scores(scores, torch.arange(4)),
                               directions=('t2i',), recall_ks=(1, 5, 10),
                               search=dict(index='ivf', nlist=1))
    assert result == pytest.approx({'t2i_R@1': 75.0, 't2i_R@5': 100.0, 't2i_R@10': 100.0})


@pytest.mark.parametrize('i2t_mode', ['standard', 'grouped'])
def test_an_exhaustive_approximate_search_counts_ties_against_the_query_as_exact_ranks(i2t_mode):
    """IVF with one cell visits every item, so its recalls are the exact ones, ties included:
    a positive tied with negatives comes after them, in the list and at its cut. Ties followed
    faiss's order: 20 collapsed media (every caption ties them all) scored text->image R@10 of
    50 where the exact ranks give 0. Small-integer vectors: every score is exact in float32,
    in faiss and in torch alike, and many tie."""
    generator = torch.Generator().manual_seed(3)
    for trial in range(20):
        num_media = 20 if trial == 0 else 12
        media = (torch.ones(num_media, 4) if trial == 0
                 else torch.randint(0, 3, (num_media, 4), generator=generator).float())
        caption_media = torch.arange(num_media).repeat_interleave(
            torch.randint(1, 4, (num_media,), generator=generator))
        captions = torch.randint(0, 3, (caption_media.numel(), 4), generator=generator).float()
        gallery = LanguageGallery(media, captions, caption_media)
        exact = evaluate_language(gallery, recall_ks=(1, 2, 5, 10), i2t_mode=i2t_mode)
        searched = evaluate_language(gallery, recall_ks=(1, 2, 5, 10), i2t_mode=i2t_mode,
                                     search=dict(index='ivf', nlist=1))
        assert searched == pytest.approx({key: value for key, value in exact.items()
                                          if 'R@' in key or key in ('AR', 'rSum')}), trial
        if trial == 0:  # collapsed media
            assert searched['t2i_R@10'] == 0


def test_a_language_without_captions_in_the_gallery_is_named_as_such():
    # Not left to fail later as "no ranks to summarise" of its empty queries.
    gallery = LanguageGallery(torch.eye(2), torch.zeros(0, 2), torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match='the language has no captions in this gallery'):
        evaluate_language(gallery)


def _brute_force_ranks(scores: torch.Tensor, query_group: torch.Tensor,
                       gallery_group: torch.Tensor) -> torch.Tensor:
    """1 + the negatives scoring at least the best positive, read off the full matrix."""
    positive = query_group[:, None] == gallery_group[None, :]
    best = scores.masked_fill(~positive, float('-inf')).amax(dim=1)
    return 1 + ((scores >= best[:, None]) & ~positive).sum(dim=1)


def _tied_gallery(seed: int = 0) -> LanguageGallery:
    """Small-integer embeddings: every product is exact, and many scores tie."""
    generator = torch.Generator().manual_seed(seed)
    media = torch.randint(-1, 2, (12, 6), generator=generator).float()
    caption_media = torch.tensor([0, 0, 1, 2, 2, 2, 3, 4, 5, 5, 6, 7, 8, 8, 9, 10, 11, 11])
    captions = torch.randint(-1, 2, (caption_media.numel(), 6), generator=generator).float()
    return LanguageGallery(media, captions, caption_media)


@pytest.mark.parametrize('i2t_mode', ['standard', 'grouped'])
@pytest.mark.parametrize('shared_limit', [None, 0], ids=['one_product', 'product_per_direction'])
def test_both_directions_equal_brute_force_ranks_with_ties(i2t_mode, shared_limit, monkeypatch):
    if shared_limit is not None:
        monkeypatch.setattr('xmr.evaluation.protocols.SHARED_SCORES_ELEMENTS', shared_limit)
    gallery = _tied_gallery()
    scores = gallery.captions @ gallery.media.T
    media = torch.arange(12)
    t2i = _brute_force_ranks(scores, gallery.caption_media, media)
    if i2t_mode == 'grouped':
        per_media = torch.stack([scores[gallery.caption_media == m].amax(dim=0) for m in media])
        i2t = _brute_force_ranks(per_media.T, media, media)
    else:
        i2t = _brute_force_ranks(scores.T, media, gallery.caption_media)
    expected = {}
    for direction, ranks in (('t2i', t2i), ('i2t', i2t)):
        for k in (1, 2, 5):
            expected[f'{direction}_R@{k}'] = 100 * (ranks <= k).double().mean().item()
        expected[f'{direction}_MdR'] = float(np.median(ranks.numpy()))
        expected[f'{direction}_MnR'] = ranks.double().mean().item()
    result = evaluate_language(gallery, recall_ks=(1, 2, 5), i2t_mode=i2t_mode)
    assert {key: result[key] for key in expected} == pytest.approx(expected, abs=1e-12)
    assert len(set(t2i.tolist())) > 3 and len(set(i2t.tolist())) > 3


def test_both_directions_rank_from_one_caption_media_product():
    """t2i ranks the rows of the [C, M] scores, i2t its columns: one product serves both
    (the second product was 28% of a COCO 5K-sized evaluation)."""
    from torch.utils.flop_counter import FlopCounterMode

    gallery = _tied_gallery()
    with FlopCounterMode(display=False) as counter:
        evaluate_language(gallery)
    assert counter.get_total_flops() == 2 * 18 * 12 * 6


def test_a_repeated_fold_is_refused():
    """``folds=(1, 1)`` would weigh fold 1 twice in the mean over folds: it is refused, both by
    :func:`check_folds` and by the galleries of ``coco_1k_5fold``."""
    with pytest.raises(ValueError, match='repeat fold 1'):
        check_folds(5, (1, 0, 1))
    with pytest.raises(ValueError, match='repeat fold 1'):
        protocol_galleries('coco_1k_5fold', 10, gallery_size=10, folds=(1, 1))


def test_chosen_folds_are_returned_in_the_order_given_with_their_boundaries():
    """Ten media in five folds of two: fold 3 is media 6-7 and fold 1 media 2-3, in the order the
    caller named them (the galleries line up with the folds asked for)."""
    galleries = protocol_galleries('coco_1k_5fold', 10, gallery_size=10, folds=(3, 1))
    assert [g.tolist() for g in galleries] == [[6, 7], [2, 3]]


def test_zero_folds_is_a_value_error_not_a_division_by_zero():
    """``num_folds=0`` is refused with the folds message, before ``num_media % 0``."""
    with pytest.raises(ValueError, match='cannot be split into 0 equal folds'):
        coco_1k_folds(10, 0)


def test_a_gallery_larger_than_the_protocol_is_refused():
    """COCO 5K on 5,001 media (an extra image) is not the protocol: refused like 4,999 is."""
    with pytest.raises(ValueError, match='defined on 5000 media, the evaluation set has 5001'):
        protocol_galleries('coco_5k', 5001)


def test_fewshot_galleries_follow_the_split_seed_and_shots():
    """``xtd10_fewshot`` with ``shots=10, split_seed=7``: the test images are those past the first
    20 of the seed-7 permutation, computed here from ``torch.randperm``."""
    perm = torch.randperm(1000, generator=torch.Generator().manual_seed(7)).tolist()
    galleries = protocol_galleries('xtd10_fewshot', 1000, shots=10, split_seed=7)
    assert [g.tolist() for g in galleries] == [perm[20:]]


def test_zero_shots_is_refused():
    """``shots=0`` would leave train and val empty: refused, as is ``shots=1`` allowed."""
    with pytest.raises(ValueError, match='got 0'):
        xtd10_fewshot_split(num_images=10, shots=0)
    split = xtd10_fewshot_split(num_images=10, shots=1)
    assert (len(split.train), len(split.val), len(split.test)) == (1, 1, 8)


def test_no_recall_k_or_no_direction_is_refused():
    """An empty ``recall_ks`` (AR would divide by zero) and empty ``directions`` (an empty
    summary) are errors, not silent results."""
    with pytest.raises(ValueError, match='recall_ks must be positive integers, got \\(\\)'):
        check_recall_ks(())
    gallery = _gallery_from_scores(torch.eye(2), torch.arange(2))
    with pytest.raises(ValueError, match='non-empty subset'):
        evaluate_language(gallery, directions=())


def test_captions_of_another_dimension_than_the_media_are_refused():
    """Captions of dimension 4 against media of dimension 3 are refused on construction, naming
    both dimensions."""
    with pytest.raises(ValueError, match='captions have dimension 4, media 3'):
        LanguageGallery(torch.eye(3), torch.ones(2, 4), torch.tensor([0, 1]))


def test_token_sets_for_only_one_side_are_refused():
    """A gallery with media token sets but no caption token sets could not be token-scored: it
    is refused on construction."""
    media_tokens = TokenSet(torch.ones(2, 1, 2), torch.ones(2, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match='both media and captions or for none'):
        LanguageGallery(torch.eye(2), torch.eye(2), torch.arange(2), media_tokens=media_tokens)


def test_an_approximate_search_with_chunk_size_none_takes_the_searchers_default():
    """``chunk_size=None`` (a config's unset value) means the searcher's own default: it is not
    passed on to the approximate index, which would refuse it. Four one-hot media, each caption
    its own media: every recall is 100."""
    gallery = LanguageGallery(torch.eye(4), torch.eye(4), torch.arange(4))
    summary = evaluate_language(gallery, search=dict(index='hnsw', chunk_size=None))
    assert summary['t2i_R@1'] == summary['i2t_R@1'] == 100.0


def test_media_searchers_keep_the_media_index_across_languages_not_the_caption_one(monkeypatch):
    """Two languages over the same media, both directions approximate: the media index is built
    once (t2i) and each language builds its own caption index (i2t), 3 builds in all. Were the
    caption index kept in its place, every language would rebuild the media index (4 builds)."""
    built = []

    class CountingSearcher(FaissSearcher):
        def __init__(self, gallery, **options):
            built.append(gallery.shape[0])
            super().__init__(gallery, **options)

    monkeypatch.setattr('xmr.evaluation.protocols.FaissSearcher', CountingSearcher)
    media = torch.eye(4)
    searchers = MediaSearchers()
    for captions in (torch.eye(4), torch.eye(4)[[0, 0, 1, 2, 3]]):
        caption_media = captions.argmax(dim=1)
        evaluate_language(LanguageGallery(media, captions, caption_media),
                          search=dict(index='hnsw'), media_searchers=searchers)
    assert built == [4, 4, 5]


def test_a_caption_of_media_row_minus_one_is_refused():
    """``caption_media = -1`` would silently index the last media row: refused like a row past
    the end."""
    with pytest.raises(ValueError, match='index the 2 media rows'):
        LanguageGallery(torch.eye(2), torch.eye(2), torch.tensor([-1, 0]))


@pytest.mark.parametrize('protocol, options, text', [
    ('standard', {}, ''), ('coco_5k', {}, ''), ('xtd200', {}, ''), ('xtd10_t2i_r10', {}, ''),
    ('coco_1k_5fold', {}, 'coco_1k_5fold: mean over its 5 folds'),
    ('coco_1k_5fold', dict(folds=[2, 0, 1]), 'coco_1k_5fold: folds 0, 1, 2 of 5'),
    # Every fold, in any order, is the mean over all of them.
    ('coco_1k_5fold', dict(num_folds=3, folds=[2, 0, 1]), 'coco_1k_5fold: mean over its 3 folds'),
    ('coco_1k_5fold', dict(folds=[0]), 'coco_1k_5fold: fold 0 of 5'),
    ('xtd10_fewshot', dict(shots=100, split_seed=7),
     'xtd10_fewshot: the test images of the 100-shot split of seed 7'),
    ('crossmodal3600_first_caption', {},
     "crossmodal3600_first_caption: each item's first caption only"),
    ('text_to_text', dict(source_language='de'),
     "text_to_text: against each item's first de caption"),
])
def test_ranked_galleries_name_what_differs_from_the_whole_set_with_every_caption(
        protocol, options, text):
    assert ranked_galleries(protocol, **options) == text


def test_every_protocol_ranking_other_galleries_says_so():
    """A protocol added with a fold, split, caption cap or text gallery must describe it: its
    results would otherwise share a table with the whole set's."""
    whole = {name for name in PROTOCOLS if not ranked_galleries(name)}
    assert whole == {'standard', 'coco_5k', 'text_to_video', 'xtd10_t2i_r10', 'crossmodal3600',
                     'xtd200', 'flickr30k_200'}
