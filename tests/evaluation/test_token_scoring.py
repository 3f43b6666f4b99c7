"""Retrieval ranked by a model's token score: exact in bounded blocks, and pooled-shortlist
re-ranking, checked against a pair-by-pair reference."""
import re

import pytest
import torch
import torch.nn.functional as F

from xmr.evaluation import RetrievalMetric
from xmr.evaluation.protocols import LanguageGallery, evaluate_language
from xmr.evaluation.token_scoring import (
    TokenScoring,
    TokenSet,
    TokenSetWriter,
    _shortlist,
    pairwise_token_scores,
    token_ranks,
)
from xmr.models.losses.cdds import patch_word_similarity

DIM = 8


def random_sequences(count, max_length, seed):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_length + 1, (count,), generator=generator)
    return [torch.randn(int(n), DIM, generator=generator) for n in lengths]


def reference_score(patches, words):
    """mean over words of the best patch cosine, one pair at a time."""
    cosine = F.normalize(words, dim=-1) @ F.normalize(patches, dim=-1).T
    return float(cosine.max(dim=1).values.mean())


def reference_ranks(scores, positive):
    """1 + negatives scoring at least the best positive, query by query ([Q, G] and bool)."""
    best = torch.where(positive, scores, torch.full_like(scores, -2)).max(dim=1).values
    return ((scores >= best[:, None]) & ~positive).sum(dim=1) + 1


@pytest.fixture(scope='module')
def gallery():
    media = random_sequences(6, 5, seed=0)
    captions = random_sequences(12, 4, seed=1)
    caption_media = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5])
    # Pooled embeddings unrelated to the tokens: only a token score can rank like the reference.
    pooled_media = F.normalize(torch.randn(6, 4, generator=torch.Generator().manual_seed(2)), dim=1)
    pooled_captions = F.normalize(torch.randn(12, 4, generator=torch.Generator().manual_seed(3)),
                                  dim=1)
    full = torch.tensor([[reference_score(m, c) for c in captions] for m in media])
    return dict(media=media, captions=captions, caption_media=caption_media,
                pooled_media=pooled_media, pooled_captions=pooled_captions, full=full)


def _token_gallery(gallery):
    return LanguageGallery(gallery['pooled_media'], gallery['pooled_captions'],
                           gallery['caption_media'], TokenSet.stack(gallery['media'], DIM),
                           TokenSet.stack(gallery['captions'], DIM))


def test_token_set_pads_and_selects_without_extra_padding():
    tokens = TokenSet.stack([torch.ones(2, DIM), torch.ones(5, DIM)], DIM)
    assert tokens.tokens.shape == (2, 5, DIM) and tokens.mask.sum(1).tolist() == [2, 5]
    first = tokens.select(torch.tensor([0]))
    assert first.tokens.shape == (1, 2, DIM) and bool(first.mask.all())


@pytest.mark.parametrize('dtype', [torch.float32, torch.float16])
def test_a_written_token_set_is_the_stacked_set_of_the_rows_kept(dtype):
    """Written a row at a time into one buffer (a gallery's tokens held once), in any order,
    a longer sequence after shorter ones widening it, the rows left unwritten dropped: the set
    of the rows kept, stacked, in ``dtype``, holding no storage of the rows dropped."""
    sequences = {0: torch.randn(2, DIM), 2: torch.randn(3, DIM), 3: torch.randn(6, DIM),
                 5: torch.randn(1, DIM)}
    writer = TokenSetWriter(6, dtype)
    for row in (2, 0, 5, 3):  # the batches of one shape come together, out of input order
        writer[row] = sequences[row]
    written = writer.finish([0, 2, 3, 5])
    expected = TokenSet.stack([sequences[row] for row in (0, 2, 3, 5)], DIM, dtype=dtype)
    assert written.tokens.dtype == dtype
    assert torch.equal(written.tokens, expected.tokens)
    assert torch.equal(written.mask, expected.mask)
    element = written.tokens.element_size()
    assert written.tokens.untyped_storage().nbytes() == 4 * 6 * DIM * element
    whole = TokenSetWriter(2, dtype)
    whole[0], whole[1] = sequences[0], sequences[3]
    assert torch.equal(whole.finish([0, 1]).tokens,
                       TokenSet.stack([sequences[0], sequences[3]], DIM, dtype=dtype).tokens)


def test_token_sets_concatenate():
    sequences = [torch.randn(2, DIM), torch.randn(5, DIM), torch.randn(3, DIM)]
    kept = TokenSet.stack(sequences, DIM)
    joined = TokenSet.cat([kept.select(slice(0, 1)), kept.select(slice(1, 3))])
    assert joined.tokens.shape == (3, 5, DIM)
    assert torch.equal(joined.tokens, kept.tokens) and torch.equal(joined.mask, kept.mask)


def test_no_media_or_no_captions_score_as_an_empty_matrix():
    """An approximate index may shortlist no media for a query: torch.cat of no block failed."""
    media = TokenSet.stack([torch.randn(3, DIM), torch.randn(2, DIM)], DIM)
    none = media.select(torch.tensor([], dtype=torch.long))
    assert pairwise_token_scores(patch_word_similarity, none, media).shape == (0, 2)
    assert pairwise_token_scores(patch_word_similarity, media, none).shape == (2, 0)


def test_pairwise_scores_in_tiny_blocks_equal_the_pair_by_pair_reference(gallery):
    media = TokenSet.stack(gallery['media'], DIM)
    captions = TokenSet.stack(gallery['captions'], DIM)
    # A budget of 40 token pairs forces blocks of one media and one caption.
    scores = pairwise_token_scores(patch_word_similarity, media, captions, budget=40)
    torch.testing.assert_close(scores, gallery['full'])


def test_a_float16_gallery_is_scored_in_float32_whatever_the_score_does(gallery):
    """The score function receives float32 blocks of a float16 gallery, so one that computes
    in its inputs' dtype (unlike patch_word_similarity, which upcasts itself) scores the
    float16-rounded values as float32 would."""
    received = []

    def summed_products(image_tokens, image_mask, text_tokens, text_mask):
        received.extend([image_tokens.dtype, text_tokens.dtype])
        image = image_tokens * image_mask[..., None]
        text = text_tokens * text_mask[..., None]
        return torch.einsum('ipd,twd->it', image, text)

    half_media = TokenSet.stack(gallery['media'], DIM, dtype=torch.float16)
    half_captions = TokenSet.stack(gallery['captions'], DIM, dtype=torch.float16)
    scores = pairwise_token_scores(summed_products, half_media, half_captions, budget=40)
    assert set(received) == {torch.float32}
    expected = summed_products(half_media.tokens.float(), half_media.mask,
                               half_captions.tokens.float(), half_captions.mask)
    torch.testing.assert_close(scores, expected)


def test_the_scores_are_float32_whatever_dtype_the_score_function_returns(gallery):
    """A score function computing in float64 hands back float64 blocks; the matrix is still
    float32, the dtype the metric's ranking and the saved galleries expect."""
    def float64_score(image_tokens, image_mask, text_tokens, text_mask):
        return patch_word_similarity(image_tokens, image_mask, text_tokens, text_mask).double()

    scores = pairwise_token_scores(float64_score, TokenSet.stack(gallery['media'], DIM),
                                   TokenSet.stack(gallery['captions'], DIM), budget=40)
    assert scores.dtype == torch.float32
    torch.testing.assert_close(scores, gallery['full'])


def test_an_unknown_scoring_mode_is_refused_when_built():
    """A misspelt mode would otherwise fall through to re-ranking, silently approximate."""
    with pytest.raises(ValueError, match=r"one of \('tokens', 'tokens_rerank'\), got 'token'"):
        TokenScoring(patch_word_similarity, 'token')


@pytest.mark.parametrize('device, cuda_available, expected', [
    (None, False, 'cpu'), (None, True, 'cuda'), ('cpu', True, 'cpu')])
def test_the_blocks_are_scored_on_the_device_asked_for_else_cuda_where_there_is_one(
        device, cuda_available, expected, monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: cuda_available)
    assert TokenScoring(patch_word_similarity, device=device).resolved_device == \
        torch.device(expected)


@pytest.mark.parametrize('direction', ['t2i', 'i2t'])
def test_exact_token_ranks_are_the_ranks_of_the_full_token_score_matrix(gallery, direction):
    media = TokenSet.stack(gallery['media'], DIM)
    captions = TokenSet.stack(gallery['captions'], DIM)
    owner = gallery['caption_media']
    ranks = token_ranks(TokenScoring(patch_word_similarity), direction, media, captions,
                        gallery['pooled_media'], gallery['pooled_captions'], owner)
    positive = owner[None, :] == torch.arange(6)[:, None]
    full = gallery['full']
    expected = reference_ranks(full.T, positive.T) if direction == 't2i' else \
        reference_ranks(full, positive)
    assert ranks.tolist() == expected.tolist()
    cosine = gallery['pooled_captions'] @ gallery['pooled_media'].T
    pooled = reference_ranks(cosine, positive.T) if direction == 't2i' else \
        reference_ranks(cosine.T, positive)
    assert ranks.tolist() != pooled.tolist()


def test_reranking_the_whole_gallery_is_exact_and_one_candidate_keeps_the_cosine_top1(gallery):
    media = TokenSet.stack(gallery['media'], DIM)
    captions = TokenSet.stack(gallery['captions'], DIM)
    owner = gallery['caption_media']
    args = (media, captions, gallery['pooled_media'], gallery['pooled_captions'], owner)
    exact = token_ranks(TokenScoring(patch_word_similarity), 't2i', *args)
    whole = token_ranks(TokenScoring(patch_word_similarity, 'tokens_rerank', 6), 't2i', *args)
    assert whole.tolist() == exact.tolist()
    single = token_ranks(TokenScoring(patch_word_similarity, 'tokens_rerank', 1), 't2i', *args)
    cosine_top1 = (gallery['pooled_captions'] @ gallery['pooled_media'].T).argmax(dim=1)
    assert (single == 1).tolist() == (cosine_top1 == owner).tolist()
    grouped_exact = token_ranks(TokenScoring(patch_word_similarity), 'i2t', *args, grouped=True)
    grouped_whole = token_ranks(TokenScoring(patch_word_similarity, 'tokens_rerank', 12), 'i2t',
                                *args, grouped=True)
    assert grouped_whole.tolist() == grouped_exact.tolist()


def test_evaluate_language_restricts_the_token_sets_with_the_gallery(gallery):
    full = _token_gallery(gallery)
    kept = torch.tensor([4, 1, 2])
    summary = evaluate_language(full.restrict(kept), recall_ks=(1,),
                                token_scoring=TokenScoring(patch_word_similarity))
    rows = torch.cat([(gallery['caption_media'] == m).nonzero().flatten() for m in kept])
    scores = gallery['full'][kept][:, rows]
    positive = torch.arange(3).repeat_interleave(2)[None, :] == torch.arange(3)[:, None]
    expected = reference_ranks(scores.T, positive.T)
    assert summary['t2i_R@1'] == pytest.approx(100 * float((expected == 1).double().mean()))
    assert summary['t2i_MnR'] == pytest.approx(float(expected.double().mean()))
    reranked = evaluate_language(full, recall_ks=(1,), token_scoring=TokenScoring(
        patch_word_similarity, 'tokens_rerank', 3))
    assert 't2i_MdR' not in reranked and 't2i_R@1' in reranked
    with pytest.raises(ValueError, match='token scoring needs the token sets'):
        evaluate_language(LanguageGallery(full.media, full.captions, full.caption_media),
                          token_scoring=TokenScoring(patch_word_similarity))


def metric_items(gallery, with_tokens=True):
    items = []
    for m in range(6):
        rows = (gallery['caption_media'] == m).nonzero().flatten()
        item = dict(media_id=str(m), index=m, media_embedding=gallery['pooled_media'][m],
                    caption_embeddings={'en': gallery['pooled_captions'][rows]})
        if with_tokens:
            item.update(media_tokens=gallery['media'][m],
                        caption_tokens={'en': [gallery['captions'][r] for r in rows]},
                        token_score=patch_word_similarity)
        items.append(item)
    return items


def test_the_metric_ranks_with_the_token_score_the_items_carry(gallery):
    metric = RetrievalMetric(languages=['en'], mean_languages=['en'], scoring='tokens')
    metric.process({}, metric_items(gallery))
    result = metric.compute_metrics(metric.results)
    positive = gallery['caption_media'][None, :] == torch.arange(6)[:, None]
    expected = reference_ranks(gallery['full'].T, positive.T)
    assert result['en/t2i_R@1'] == pytest.approx(100 * float((expected == 1).double().mean()))
    embedding = RetrievalMetric(languages=['en'], mean_languages=['en'])
    embedding.process({}, metric_items(gallery))
    assert embedding.compute_metrics(embedding.results) != result


def test_the_media_tokens_are_padded_once_for_every_language(gallery, monkeypatch):
    """Each language's gallery stacked the media's tokens anew (a COCO 5K set of ViT-B/16
    tokens is 2 GB): one set now serves them all, and each language scores as alone."""
    items = metric_items(gallery)
    for item in items:  # a second language: the English captions reversed in each item
        item['caption_embeddings']['de'] = item['caption_embeddings']['en'].flip(0)
        item['caption_tokens']['de'] = item['caption_tokens']['en'][::-1]
    alone = {}
    for lang in ('en', 'de'):
        metric = RetrievalMetric(languages=[lang], mean_languages=[lang], scoring='tokens')
        metric.process({}, items)
        alone.update(metric.compute_metrics(metric.results))
    media_sets = []
    original = TokenSet.stack

    def spy(sequences, width, dtype=torch.float32):
        if len(sequences) == len(items) and sequences[0].shape == gallery['media'][0].shape:
            media_sets.append(len(sequences))
        return original(sequences, width, dtype)

    monkeypatch.setattr(TokenSet, 'stack', spy)
    both = RetrievalMetric(languages=['en', 'de'], mean_languages=['en', 'de'],
                           scoring='tokens')
    both.process({}, items)
    result = both.compute_metrics(both.results)
    assert media_sets == [len(items)]
    per_language = {key: value for key, value in alone.items() if '/' in key}
    assert len(per_language) > 10
    assert {key: result[key] for key in per_language} == per_language


def test_the_metrics_of_one_evaluator_hold_one_copy_of_each_token_sequence(gallery):
    """Each metric processing the same items held a copy of its own: COCO's two token
    metrics took 2.3x the media tokens (12.7 GiB for 5K images) and peaked at 4x."""
    import gc

    from xmr.evaluation.metrics import retrieval

    items = metric_items(gallery)
    metrics = [RetrievalMetric(languages=['en'], mean_languages=['en'], scoring='tokens',
                               prefix=prefix) for prefix in ('coco1k', 'coco5k')]
    for metric in metrics:
        metric.process({}, items)
    first, second = (metric.results[0] for metric in metrics)
    assert first['media_tokens'] is second['media_tokens']
    assert first['caption_tokens']['en'][0] is second['caption_tokens']['en'][0]
    assert metrics[0].compute_metrics(metrics[0].results) == metrics[1].compute_metrics(
        metrics[1].results)
    # A copy outlives the tensor it was made of (the metric holds it); its entry does not.
    views = [id(item['media_embedding']) for item in items]  # row views made for the items
    assert all(view in retrieval._COPIES for view in views)
    del items
    gc.collect()
    assert not any(view in retrieval._COPIES for view in views)
    assert first['media_embedding'].shape == gallery['pooled_media'][0].shape
    # A buffer changed in place between two items is copied as it is then.
    buffer = torch.ones(4)
    before = retrieval._compact(buffer, 'buffer')
    buffer.mul_(2)
    assert retrieval._compact(buffer, 'buffer').tolist() == [2.0] * 4
    assert before.tolist() == [1.0] * 4


def test_the_metric_names_what_is_missing_for_token_scoring(gallery):
    metric = RetrievalMetric(scoring='tokens_rerank', rerank_candidates=10)
    with pytest.raises(KeyError, match=r"media '0': token scoring needs \['media_tokens', "
                                       r"'caption_tokens', 'token_score'\].*retrieval_score="):
        metric.process({}, metric_items(gallery, with_tokens=False))
    with pytest.raises(ValueError, match="scoring must be 'embedding' or one of"):
        RetrievalMetric(scoring='patch_word')
    with pytest.raises(ValueError, match=r"search \{'index': 'hnsw'\} applies to"):
        RetrievalMetric(scoring='tokens', search=dict(index='hnsw'))
    broken = metric_items(gallery)[:1]
    broken[0]['caption_tokens'] = {'en': broken[0]['caption_tokens']['en'][:1]}
    with pytest.raises(ValueError, match="1 caption token sequences in 'en' for 2 caption"):
        metric.process({}, broken)


@pytest.mark.parametrize('mode', ['tokens', 'tokens_rerank'])
def test_a_nan_token_score_is_an_error_in_both_modes(gallery, mode):
    """A score function returning NaN (e.g. a mean over zero words) must not be ranked: sorted
    descending, torch puts NaN first, and compared, it never counts."""
    def nan_for_caption_3(image_tokens, image_mask, text_tokens, text_mask):
        scores = patch_word_similarity(image_tokens, image_mask, text_tokens, text_mask)
        is_three = (text_tokens[:, 0] == captions.tokens[3, 0]).all(dim=-1)
        return scores.masked_fill(is_three[None], float('nan'))

    media = TokenSet.stack(gallery['media'], DIM)
    captions = TokenSet.stack(gallery['captions'], DIM)
    with pytest.raises(ValueError, match='NaN'):
        token_ranks(TokenScoring(nan_for_caption_3, mode, 12), 'i2t', media, captions,
                    gallery['pooled_media'], gallery['pooled_captions'], gallery['caption_media'])


def test_recalls_past_the_rerank_shortlist_are_refused(gallery):
    """With a shortlist of 3, a positive outside it ranks 4th at most by the list, a hit at
    R@5 whatever its true rank: R@K past the shortlist cannot be read from it."""
    with pytest.raises(ValueError, match=r'recall_ks \(1, 5, 10\) reach past rerank_candidates 3'):
        RetrievalMetric(scoring='tokens_rerank', rerank_candidates=3)
    full = _token_gallery(gallery)
    with pytest.raises(ValueError, match='R@5 cannot be read from a re-ranked shortlist of 3'):
        evaluate_language(full, recall_ks=(1, 5), token_scoring=TokenScoring(
            patch_word_similarity, 'tokens_rerank', 3))


@pytest.mark.parametrize('candidates', [0, 20.0])
def test_a_shortlist_length_that_is_no_positive_integer_is_refused_when_built(candidates):
    """20.0 was accepted, and torch's topk refused the float only at scoring time, after the
    gallery was encoded (galleries larger than the shortlist)."""
    with pytest.raises(ValueError, match=rf'rerank_candidates must be a positive integer, got '
                                         rf'{candidates!r}'):
        RetrievalMetric(scoring='tokens_rerank', rerank_candidates=candidates)


def test_grouped_rerank_shortlists_the_captions_of_as_many_media_as_candidates():
    """Four media with two captions each; by pooled cosine, media 0 sees both captions of media
    1 first, then those of media 2 and 3, and its own captions last. With 2 candidates its own
    captions are in no shortlist of the captions of 2 media, so it is a miss at R@1 and R@2
    (a shortlist of 2 captions held media 1 alone, and ranked media 0 second: a hit at R@2)."""
    axis = F.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), dim=1)
    pooled_media = torch.stack([axis[0]] * 4)
    cosines = [-1.0, -1.0, 1.0, 1.0, 0.9, 0.9, 0.8, 0.8]   # captions of media 0, 1, 2, 3
    pooled_captions = torch.tensor([[c, (1 - c * c) ** 0.5] for c in cosines])
    caption_media = torch.arange(4).repeat_interleave(2)
    media = TokenSet.stack(random_sequences(4, 3, seed=5), DIM)
    captions = TokenSet.stack(random_sequences(8, 3, seed=6), DIM)
    ranks = token_ranks(TokenScoring(patch_word_similarity, 'tokens_rerank', 2), 'i2t', media,
                        captions, pooled_media, pooled_captions, caption_media, grouped=True)
    assert ranks[0].item() > 2


@pytest.mark.parametrize('direction, grouped', [('t2i', False), ('i2t', False), ('i2t', True)])
def test_reranked_ties_count_against_the_query_as_exact_ranks_do(direction, grouped):
    """A collapsed model (every token and pooled embedding the same) ties every pair: the exact
    ranking puts each positive behind all its tied negatives (3 media, 2 captions each: t2i
    rank 3, i2t rank 5, grouped 3), and a shortlist of the whole gallery must too, not leave
    the positive where the cosine's top-k happened to put it."""
    media = TokenSet.stack([torch.ones(2, DIM)] * 3, DIM)
    captions = TokenSet.stack([torch.ones(3, DIM)] * 6, DIM)
    pooled_media = F.normalize(torch.ones(3, 4), dim=1)
    pooled_captions = F.normalize(torch.ones(6, 4), dim=1)
    args = (direction, media, captions, pooled_media, pooled_captions,
            torch.arange(3).repeat_interleave(2))
    exact = token_ranks(TokenScoring(patch_word_similarity), *args, grouped=grouped)
    expected = {('t2i', False): [3] * 6, ('i2t', False): [5] * 3, ('i2t', True): [3] * 3}
    assert exact.tolist() == expected[direction, grouped]
    whole = token_ranks(TokenScoring(patch_word_similarity, 'tokens_rerank', 6), *args,
                        grouped=grouped)
    assert whole.tolist() == exact.tolist()


@pytest.mark.parametrize('direction', ['t2i', 'i2t'])
def test_a_positive_tied_at_the_shortlists_cut_is_left_out_for_the_negatives(direction):
    """A collapsed model, 10 media of a caption each, 5 candidates: every positive ties with 9
    negatives, so it ranks 10 and R@5 is 0. The cosine's top-k shortlisted by index order and
    held the positive of half the queries: R@5 = 50."""
    media = TokenSet.stack([torch.ones(2, DIM)] * 10, DIM)
    captions = TokenSet.stack([torch.ones(3, DIM)] * 10, DIM)
    pooled = F.normalize(torch.ones(10, 4), dim=1)
    ranks = token_ranks(TokenScoring(patch_word_similarity, 'tokens_rerank', 5), direction,
                        media, captions, pooled, pooled, torch.arange(10))
    assert ranks.tolist() == [6] * 10  # past the 5 negatives shortlisted: a miss at every R@5


@pytest.mark.parametrize('direction', ['t2i', 'i2t'])
def test_every_chunk_of_queries_leaves_out_its_own_tied_positives(direction, monkeypatch):
    """The same collapsed gallery shortlisted three queries at a time: each chunk must nudge
    down the positives of its own queries, not those of the first chunk's."""
    monkeypatch.setattr('xmr.evaluation.token_scoring.default_chunk_size',
                        lambda gallery_size: 6)
    media = TokenSet.stack([torch.ones(2, DIM)] * 10, DIM)
    captions = TokenSet.stack([torch.ones(3, DIM)] * 10, DIM)
    pooled = F.normalize(torch.ones(10, 4), dim=1)
    ranks = token_ranks(TokenScoring(patch_word_similarity, 'tokens_rerank', 5), direction,
                        media, captions, pooled, pooled, torch.arange(10))
    assert ranks.tolist() == [6] * 10


def test_the_shortlist_keeps_a_positive_one_float_step_above_the_cut():
    """Only a tie is left out: a positive whose float32 cosine is one step above a negative's
    outranks it."""
    below_one = torch.nextafter(torch.tensor(1.0), torch.tensor(0.0)).item()
    query = torch.tensor([[1.0]])
    positive = torch.tensor([[False, True]])
    tied = torch.tensor([[1.0], [1.0]])
    assert _shortlist(query, tied, positive, 1).tolist() == [[0]]
    one_step = torch.tensor([[below_one], [1.0]])
    assert _shortlist(query, one_step, positive, 1).tolist() == [[1]]
    assert _shortlist(query, one_step, ~positive, 1).tolist() == [[1]]


def test_a_shortlist_of_no_candidates_is_refused():
    with pytest.raises(ValueError, match='rerank candidates must be positive, got 0'):
        TokenScoring(patch_word_similarity, 'tokens_rerank', 0)


def test_recall_at_the_shortlist_length_is_read_and_is_the_shortlists_hit_rate(gallery):
    """R@3 of a 3-item shortlist is exact: re-ordering cannot move a positive in or out of it,
    so it is the share of captions whose media the pooled cosine shortlists."""
    summary = evaluate_language(_token_gallery(gallery), directions=('t2i',), recall_ks=(1, 3),
                                token_scoring=TokenScoring(patch_word_similarity,
                                                           'tokens_rerank', 3))
    shortlist = (gallery['pooled_captions'] @ gallery['pooled_media'].T).topk(3, dim=1).indices
    held = (shortlist == gallery['caption_media'][:, None]).any(dim=1)
    assert summary['t2i_R@3'] == pytest.approx(100 * float(held.double().mean()))


def test_grouped_i2t_leaves_the_reranked_text_to_media_shortlist_as_it_is(gallery):
    """Grouped mode is the DASD code's media→text ranking; text→media must keep its shortlist
    of `candidates` media, not grow it by the largest caption count (which re-ranks more media
    and changes t2i R@1 here)."""
    def t2i_r1(i2t_mode):
        return evaluate_language(_token_gallery(gallery), recall_ks=(1,), i2t_mode=i2t_mode,
                                 token_scoring=TokenScoring(patch_word_similarity,
                                                            'tokens_rerank', 2))['t2i_R@1']

    assert t2i_r1('grouped') == t2i_r1('standard')


def test_items_carrying_different_token_scores_are_refused(gallery):
    """One gallery ranked with one score: items of two models (two score functions) must not
    be ranked with whichever score came first."""
    def halved(image_tokens, image_mask, text_tokens, text_mask):
        return patch_word_similarity(image_tokens, image_mask, text_tokens, text_mask) / 2

    items = metric_items(gallery)
    items[3]['token_score'] = halved
    metric = RetrievalMetric(languages=['en'], mean_languages=['en'], scoring='tokens')
    metric.process({}, items)
    with pytest.raises(ValueError, match='the gallery items carry different token scores'):
        metric.compute_metrics(metric.results)


def test_a_first_caption_protocol_scores_the_tokens_of_each_media_s_first_caption(gallery):
    """crossmodal3600_first_caption keeps each media's first caption: its token sets must be
    cut as its embeddings are, and the token ranks are those of the first captions alone."""
    metric = RetrievalMetric(languages=['en'], mean_languages=['en'], scoring='tokens',
                             protocol='crossmodal3600_first_caption', gallery_size=6)
    metric.process({}, metric_items(gallery))
    result = metric.compute_metrics(metric.results)
    first = torch.arange(0, 12, 2)  # each media's captions are rows 2m, 2m + 1
    scores = gallery['full'][:, first]  # [media, first captions]
    positive = torch.eye(6, dtype=torch.bool)
    t2i = reference_ranks(scores.T, positive)
    i2t = reference_ranks(scores, positive)
    for k in (1, 5):
        assert result[f'en/t2i_R@{k}'] == pytest.approx(100 * float((t2i <= k).double().mean()))
        assert result[f'en/i2t_R@{k}'] == pytest.approx(100 * float((i2t <= k).double().mean()))
    assert result['en/t2i_MnR'] == pytest.approx(float(t2i.double().mean()))
    assert result['en/i2t_MnR'] == pytest.approx(float(i2t.double().mean()))


def test_token_sequences_of_another_shape_or_a_score_that_is_no_function_are_refused(gallery):
    """Checked as each item is processed, naming the media, not when the gallery is scored."""
    metric = RetrievalMetric(scoring='tokens')
    narrow = metric_items(gallery)[:1]
    narrow[0]['caption_tokens'] = {'en': [narrow[0]['caption_tokens']['en'][0],
                                          narrow[0]['caption_tokens']['en'][1][:, :DIM - 1]]}
    with pytest.raises(ValueError, match=re.escape(
            f"media '0': token sequences must be [L, D] of one width D, got widths "
            f'[{DIM - 1}, {DIM}]')):
        metric.process({}, narrow)
    flat = metric_items(gallery)[:1]
    flat[0]['media_tokens'] = flat[0]['media_tokens'][0]  # [D], not [P, D]
    with pytest.raises(ValueError, match="media '0': token sequences must be \\[L, D\\]"):
        metric.process({}, flat)
    scoreless = metric_items(gallery)[:1]
    scoreless[0]['token_score'] = 'patch_word'
    with pytest.raises(TypeError, match="media '0': token_score must be a function, got str"):
        metric.process({}, scoreless)


def test_the_metric_reranks_as_asked_a_one_candidate_shortlist_keeping_the_cosine_top1(gallery):
    """scoring='tokens_rerank' re-orders the cosine shortlist, recalls only: with one candidate
    the R@1 are those of the cosine ranking, and no MdR / MnR is reported."""
    reranked = RetrievalMetric(languages=['en'], mean_languages=['en'], recall_ks=(1,),
                               scoring='tokens_rerank', rerank_candidates=1)
    reranked.process({}, metric_items(gallery))
    result = reranked.compute_metrics(reranked.results)
    cosine = RetrievalMetric(languages=['en'], mean_languages=['en'], recall_ks=(1,))
    cosine.process({}, metric_items(gallery))
    expected = cosine.compute_metrics(cosine.results)
    assert {key: result[key] for key in ('en/t2i_R@1', 'en/i2t_R@1')} == pytest.approx(
        {key: expected[key] for key in ('en/t2i_R@1', 'en/i2t_R@1')})
    assert not [key for key in result if key.endswith(('MdR', 'MnR'))]
