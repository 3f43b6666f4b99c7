"""Ranks on hand-built similarity matrices; ties always count against the query."""
import pytest
import torch

from xmr.evaluation.ranking import (
    average_recall,
    group_max_scores,
    grouped_ranks_from_scores,
    mean_rank,
    media_to_text_ranks,
    median_rank,
    positive_pairs,
    rank_summary,
    ranks_from_scores,
    ranks_from_topk,
    recall_at_k,
    recall_sum,
    text_to_media_ranks,
    ties_against_query,
)

# Captions (rows) × media (columns); caption i belongs to media i.
T2I_SCORES = torch.tensor([
    [0.5, 0.5, 0.2],  # ties with media 1: the tie counts against the query -> rank 2
    [0.1, 0.8, 0.3],  # rank 1
    [0.7, 0.9, 0.4],  # two media ahead -> rank 3
])

# Media (rows) × captions (columns): media 0 owns captions 0 and 1, media 1 owns caption 2,
# media 2 owns captions 3 and 4.
CAPTION_MEDIA = torch.tensor([0, 0, 1, 2, 2])
I2T_SCORES = torch.tensor([
    # best own 0.6 (caption 1); caption 2 (0.7) is ahead and caption 4 ties (0.6) -> rank 3
    [0.2, 0.6, 0.7, 0.1, 0.6],
    # own 0.5; captions 3 and 4 of media 2 are ahead -> rank 3, but only one *group* -> 2
    [0.3, 0.3, 0.5, 0.9, 0.8],
    # best own 0.4 -> rank 1
    [0.1, 0.1, 0.1, 0.4, 0.2],
])


def test_text_to_media_ranks_count_ties_against_the_query():
    ranks = text_to_media_ranks(T2I_SCORES, torch.tensor([0, 1, 2]))
    assert ranks.tolist() == [2, 1, 3]


def test_media_to_text_rank_is_the_best_own_caption_with_ties_against():
    assert media_to_text_ranks(I2T_SCORES, CAPTION_MEDIA).tolist() == [3, 3, 1]


def test_own_captions_never_count_against_each_other():
    scores = torch.tensor([[0.9, 0.9, 0.1]])  # both own captions tie at the top
    ranks = ranks_from_scores(scores, torch.tensor([0]), torch.tensor([0, 0, 1]))
    assert ranks.tolist() == [1]


def test_grouped_media_to_text_counts_other_media_once():
    grouped = media_to_text_ranks(I2T_SCORES, CAPTION_MEDIA, grouped=True)
    # media 0: media 1's group scores 0.7 and media 2's 0.6 (a tie) -> still rank 3;
    # media 1: only media 2's group (0.9) is ahead -> rank 2 where the standard rank is 3.
    assert grouped.tolist() == [3, 2, 1]
    standard = media_to_text_ranks(I2T_SCORES, CAPTION_MEDIA)
    assert recall_at_k(grouped, 1) == recall_at_k(standard, 1)
    assert recall_at_k(grouped, 2) == pytest.approx(200 / 3)
    assert recall_at_k(standard, 2) == pytest.approx(100 / 3)


def test_group_max_scores_takes_each_group_best_item():
    out = group_max_scores(I2T_SCORES, CAPTION_MEDIA, 3)
    expected = torch.tensor([[0.6, 0.7, 0.6], [0.3, 0.5, 0.9], [0.1, 0.1, 0.4]])
    assert torch.equal(out, expected)


def test_grouped_rank_never_exceeds_standard_and_matches_loop_reference():
    generator = torch.Generator().manual_seed(0)
    owners = torch.randint(0, 6, (30,), generator=generator)
    owners[:6] = torch.arange(6)
    scores = torch.rand(6, 30, generator=generator)
    grouped = media_to_text_ranks(scores, owners, grouped=True)
    standard = media_to_text_ranks(scores, owners)
    for media in range(6):
        best_own = scores[media, owners == media].max()
        groups_ahead = {int(owners[c]) for c in range(30)
                        if owners[c] != media and scores[media, c] >= best_own}
        captions_ahead = sum(1 for c in range(30)
                             if owners[c] != media and scores[media, c] >= best_own)
        assert grouped[media] == 1 + len(groups_ahead)
        assert standard[media] == 1 + captions_ahead
    assert bool((grouped <= standard).all())
    assert bool(((grouped == 1) == (standard == 1)).all())


def test_ranks_match_sorting_reference_without_ties():
    generator = torch.Generator().manual_seed(1)
    scores = torch.rand(40, 25, generator=generator)
    positives = torch.randint(0, 25, (40,), generator=generator)
    order = scores.argsort(dim=1, descending=True)
    reference = (order == positives[:, None]).int().argmax(dim=1) + 1
    assert torch.equal(text_to_media_ranks(scores, positives), reference)


def test_query_without_positive_is_an_error():
    with pytest.raises(ValueError, match='no positive'):
        ranks_from_scores(torch.rand(2, 3), torch.tensor([0, 7]), torch.tensor([0, 1, 2]))
    # Grouped: group 2 is in range but holds no gallery item.
    with pytest.raises(ValueError, match=r'queries \[1\] \(row indices\) have no positive'):
        grouped_ranks_from_scores(torch.rand(2, 3), torch.tensor([0, 2]), torch.tensor([0, 1, 1]),
                                  3)


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match='query_group'):
        ranks_from_scores(torch.rand(2, 3), torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2]))


def test_a_gallery_group_shorter_than_the_gallery_is_an_error():
    """A ``gallery_group`` naming 2 of 3 gallery columns is refused, not ranked.

    Without the check the third column would never be compared with anything a query's
    positives are looked up in, and the ranks would come back silently from a partial gallery.
    """
    with pytest.raises(ValueError, match=r'gallery_group \[3\], got \(2,\) and \(2,\)'):
        ranks_from_scores(torch.rand(2, 3), torch.tensor([0, 1]), torch.tensor([0, 1]))


def test_ranks_from_topk_standard_and_grouped():
    gallery_group = torch.tensor([0, 0, 1, 2, 2, 3])
    indices = torch.tensor([
        [3, 4, 2, 0],   # query of group 1: captions of group 2 (twice) then its own
        [5, 0, 1, 2],   # query of group 0: one negative then its own
        [0, 1, 3, -1],  # query of group 3: not retrieved; an empty faiss slot at the end
    ])
    query_group = torch.tensor([1, 0, 3])
    # not found: three negatives and the empty slot ahead -> 5, a miss at every K <= 4
    assert ranks_from_topk(indices, query_group, gallery_group).tolist() == [3, 2, 5]
    grouped = ranks_from_topk(indices, query_group, gallery_group, grouped=True)
    # not found: two distinct negative groups (0, 2) and the empty slot in the list -> 4
    assert grouped.tolist() == [2, 2, 4]


def test_a_list_ordered_for_the_tie_rule_puts_each_positive_after_the_negatives_it_ties():
    scores = torch.tensor([[0.5, 0.9, 0.5, 0.9]])
    positive = torch.tensor([[False, True, True, False]])
    # 0.9: negative 3 before positive 1; then 0.5: negative 0 before positive 2.
    assert ties_against_query(scores, positive).tolist() == [[3, 1, 0, 2]]


def test_a_positive_tied_with_a_hundred_item_list_goes_last():
    """A collapsed list of 100 equal scores (the size where torch's unstable sort reorders ties)
    with its positive first: the positive goes after all 99 negatives, and the negatives keep
    their list order, so the query ranks 100, not wherever a sort left it."""
    scores = torch.zeros(1, 100)
    positive = torch.zeros(1, 100, dtype=torch.bool)
    positive[0, 0] = True
    assert ties_against_query(scores, positive).tolist() == [list(range(1, 100)) + [0]]


def test_topk_lists_must_be_one_row_per_query():
    # A flat [k] list would broadcast against the [Q] groups into a [Q, k] grid of nonsense.
    with pytest.raises(ValueError, match=r'indices must be \[Q, k\] with Q = 3, got \(3,\)'):
        ranks_from_topk(torch.tensor([0, 1, 2]), torch.arange(3), torch.arange(3))


def test_a_positive_the_search_did_not_return_is_a_miss_at_every_k_of_the_list():
    """faiss pads a list it could not fill with -1 (IVF probing few cells): a query whose
    positive is not among the returned items must not become a hit at K beyond the returned
    count. Reference: R@K = share of queries whose positive is among the first K slots."""
    gallery_group = torch.arange(6)
    indices = torch.tensor([[1, 2, -1, -1, -1],   # positive 5 never returned
                            [4, 3, -1, -1, -1],   # positive 3 returned second
                            [-1, -1, -1, -1, -1]])  # nothing returned
    query_group = torch.tensor([5, 3, 0])
    ranks = ranks_from_topk(indices, query_group, gallery_group)
    for k in range(1, 6):
        expected = 100 * sum(int(group) in row[:k].tolist()
                             for row, group in zip(indices, query_group)) / 3
        assert recall_at_k(ranks, k) == pytest.approx(expected)
    # Grouped: k slots hold at least k / (largest group) groups; an unfound group stays a miss.
    captions_of = torch.tensor([0, 0, 1, 1, 2, 2])   # three media, two captions each
    grouped = ranks_from_topk(torch.tensor([[2, 3, -1, -1]]), torch.tensor([2]), captions_of,
                              grouped=True)
    assert grouped.item() > 4 // 2


def _grouped_rank_by_reading(row: list[int], own: int, groups: list[int]) -> int:
    """A grouped rank read off one list slot by slot: 1 + the distinct other groups and the
    empty slots met before the first own item (all of them when there is none)."""
    ahead, seen = 1, set()
    for item in row:
        if item < 0:
            ahead += 1
        elif groups[item] == own:
            break
        elif groups[item] not in seen:
            seen.add(groups[item])
            ahead += 1
    return ahead


def test_grouped_ranks_of_long_lists_equal_reading_each_list():
    """Lists as long as a re-ranked shortlist of grouped media->text (rerank_candidates x the
    captions of a media: 100 x 20 on MSR-VTT), most groups met several times, empty slots
    among them; the first appearances are found by one sort per list, where every position
    was compared with all those before it (O(k^2) a query: 16 s at 1,000 x 2,000)."""
    generator = torch.Generator().manual_seed(0)
    gallery_group = torch.randint(0, 40, (300,), generator=generator)
    indices = torch.randint(-1, 300, (50, 400), generator=generator)
    query_group = torch.randint(0, 40, (50,), generator=generator)
    query_group[0] = 40  # a group the list never holds
    expected = [_grouped_rank_by_reading(row, int(own), gallery_group.tolist())
                for row, own in zip(indices.tolist(), query_group)]
    assert ranks_from_topk(indices, query_group, gallery_group, grouped=True).tolist() == expected


def test_rank_summary_and_averages_by_hand():
    ranks = torch.tensor([1, 2, 3, 10])
    summary = rank_summary(ranks, (1, 5, 10), 't2i')
    assert summary == pytest.approx({'t2i_R@1': 25.0, 't2i_R@5': 75.0, 't2i_R@10': 100.0,
                                     't2i_MdR': 2.5, 't2i_MnR': 4.0})
    summary.update(rank_summary(torch.tensor([1, 1, 6, 20]), (1, 5, 10), 'i2t', exact=False))
    assert 'i2t_MdR' not in summary
    assert recall_sum(summary, ('t2i', 'i2t'), (1, 5, 10)) == pytest.approx(200 + 50 + 50 + 75)
    assert average_recall(summary, ('t2i', 'i2t'), (1, 5, 10)) == pytest.approx(375 / 6)


def test_median_of_odd_count_is_the_middle_rank():
    assert median_rank(torch.tensor([7, 1, 3])) == 3.0


@pytest.mark.parametrize('statistic', [lambda ranks: recall_at_k(ranks, 1), median_rank,
                                       mean_rank])
def test_empty_ranks_are_an_error(statistic):
    # numpy's median of nothing is NaN with a warning, not an error.
    with pytest.raises(ValueError, match='no queries'):
        statistic(torch.zeros(0, dtype=torch.long))


def test_grouped_ranks_need_gallery_groups_in_range():
    with pytest.raises(ValueError, match='num_groups'):
        grouped_ranks_from_scores(torch.rand(1, 2), torch.tensor([0]), torch.tensor([0, 3]), 2)


def test_a_gallery_group_equal_to_num_groups_is_out_of_range():
    # Groups are 0..num_groups-1: group 2 of 2 groups has no column to be scored into.
    with pytest.raises(ValueError, match='holds group 2 but num_groups is 2'):
        group_max_scores(torch.rand(1, 2), torch.tensor([0, 2]), 2)


def test_positive_pairs_lists_every_same_group_pair_by_query():
    rows, cols = positive_pairs(torch.tensor([2, 0]), torch.tensor([0, 2, 1, 2, 0]))
    assert rows.tolist() == [0, 0, 1, 1]
    assert cols.tolist() == [1, 3, 0, 4]


def test_ranks_of_all_negative_scores_follow_the_scores():
    # Cosines can all be negative: caption 0's own media scores -0.5 while media 1 scores -0.2
    # (rank 2); caption 1's own media scores -0.1, above -0.3 (rank 1).
    scores = torch.tensor([[-0.5, -0.2],
                           [-0.3, -0.1]])
    assert text_to_media_ranks(scores, torch.tensor([0, 1])).tolist() == [2, 1]
    # Media 0 owns captions 0 and 1 (best own -0.4); caption 2 of media 1 scores -0.1 -> rank 2.
    i2t = torch.tensor([[-0.9, -0.4, -0.1],
                        [-0.8, -0.7, -0.6]])
    assert media_to_text_ranks(i2t, torch.tensor([0, 0, 1])).tolist() == [2, 1]


def test_average_recall_is_the_mean_over_the_given_directions_and_ks_only():
    summary = {'t2i_R@1': 30.0, 't2i_R@5': 60.0, 'i2t_R@1': 90.0, 'i2t_R@5': 100.0}
    # one direction, two K: (30 + 60) / 2
    assert average_recall(summary, ('t2i',), (1, 5)) == pytest.approx(45.0)
    # two directions, one K: (30 + 90) / 2
    assert average_recall(summary, ('t2i', 'i2t'), (1,)) == pytest.approx(60.0)
    assert recall_sum(summary, ('i2t',), (1, 5)) == pytest.approx(190.0)


def test_a_nan_score_is_an_error_not_a_rank():
    """No comparison holds for NaN: counted as ``1 + #{negatives >= best}`` a NaN best positive
    ranked first (a hit at every K) and a NaN negative never counted against its query."""
    nan = float('nan')
    with pytest.raises(ValueError, match=r'query rows \[0\].*NaN'):
        text_to_media_ranks(torch.tensor([[nan, 0.9], [0.1, 0.9]]), torch.arange(2))
    with pytest.raises(ValueError, match=r'query rows \[1\].*NaN'):
        media_to_text_ranks(torch.tensor([[0.9, 0.1, 0.2], [0.1, nan, 0.2]]),
                            torch.tensor([0, 0, 1]), grouped=True)


def test_infinite_scores_of_both_signs_rank_and_only_a_nan_row_is_refused():
    """A row of +inf and -inf sums to NaN without holding one: it is ranked, not refused."""
    inf, nan = float('inf'), float('nan')
    assert text_to_media_ranks(torch.tensor([[inf, -inf], [-inf, inf]]),
                               torch.arange(2)).tolist() == [1, 1]
    with pytest.raises(ValueError, match=r'query rows \[1\] '):
        text_to_media_ranks(torch.tensor([[inf, -inf], [nan, inf], [-inf, inf]]),
                            torch.tensor([0, 1, 1]))
