"""A gallery searched by a model that scores pairs from their tokens (CDDS's patch–word matching)
ranks as its evaluation does: by the token score of the whole gallery, or of the pooled cosine's
best candidates, its tokens kept through growing, shrinking, saving, loading and parts."""
from __future__ import annotations

import os
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.apis.conftest import random_images
from tests.apis.test_dual_encoder import QUERIES, TINY, dual_encoder_cfg
from xmr.apis import MediaIndex, encode_gallery, encode_text_tokens, encode_texts
from xmr.apis.encoding_parts import EncodingParts
from xmr.apis.inference import media_encoding
from xmr.datasets.corrupt_policy import MediaSkippedWarning
from xmr.datasets.media_io import read_image
from xmr.datasets.transforms import MediaTransform
from xmr.evaluation.token_scoring import (
    TokenScoring,
    TokenSet,
    TokenSetWriter,
    pairwise_token_scores,
    token_ranks,
)
from xmr.registry import MODELS

NAMES = ('beach', 'forest', 'city', 'desert', 'lake', 'field')


@pytest.fixture(scope='module')
def model():
    """A patch-word CDDS dual encoder whose disentangler moved away from its init."""
    torch.manual_seed(0)
    built = MODELS.build(dual_encoder_cfg(retrieval_score='patch_word'))
    with torch.no_grad():
        for parameter in built.disentangler.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return built.eval()


@pytest.fixture
def image_files(tmp_path):
    return random_images(tmp_path, NAMES)


@torch.no_grad()
def semantic_media(model, files) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each image's real semantic-component tokens ``[P, D]`` (the image tower's tokens through
    CDDS's image encoder) and the ``[N, E]`` pooled, L2-normalised embeddings."""
    resize = MediaTransform(backbone=None, size=32)
    media = model.data_preprocessor.normalize_media(
        torch.stack([resize(read_image(path)) for path in files]))
    out = model.backbone.encode_media_tokens(media)
    semantic = model.disentangler.encode_image(out.tokens, out.mask)
    pooled = F.normalize(model.disentangler.pool(semantic, out.mask), dim=-1)
    return [semantic[row][out.mask[row]] for row in range(len(files))], pooled


@torch.no_grad()
def semantic_texts(model, texts, lang) -> tuple[list[torch.Tensor], torch.Tensor]:
    """As :func:`semantic_media`, for texts through the text tower."""
    tokens = model.backbone.tokenizer.evaluation_batch(texts, [lang] * len(texts))
    out = model.backbone.encode_text_tokens(tokens)
    semantic = model.disentangler.encode_text(out.tokens, out.mask)
    pooled = F.normalize(model.disentangler.pool(semantic, out.mask), dim=-1)
    return [semantic[row][out.mask[row]] for row in range(len(texts))], pooled


def patch_word(patches: torch.Tensor, words: torch.Tensor) -> float:
    """CDDS §3.5 by its definition: each word's best cosine over the patches, averaged."""
    best = []
    for word in words:
        best.append(max(float(torch.dot(word, patch) / (word.norm() * patch.norm()))
                        for patch in patches))
    return sum(best) / len(best)


def by_hand_scores(model, files, texts, lang) -> torch.Tensor:
    """``[Q, N]`` patch-word scores of each text and image."""
    patches, _ = semantic_media(model, files)
    words, _ = semantic_texts(model, texts, lang)
    return torch.tensor([[patch_word(image, text) for image in patches] for text in words])


def assert_hits(hits, ids, scores):
    assert [hit.media_id for hit in hits] == ids
    assert [hit.score for hit in hits] == pytest.approx(scores, abs=1e-5)


def test_the_whole_gallery_is_ranked_by_the_patch_word_score(model, image_files):
    """It was ranked by the pooled cosine, which the model's evaluation does not report."""
    index = MediaIndex.from_media(model, image_files, transform=TINY)
    assert len(index.tokens) == len(NAMES) and 'with media tokens' in repr(index)
    for lang, texts in QUERIES.items():
        expected = by_hand_scores(model, image_files, texts, lang)
        pooled = semantic_texts(model, texts, lang)[1] @ semantic_media(model, image_files)[1].T
        assert not torch.allclose(expected, pooled, atol=1e-3)  # the two scores differ here
        for row, hits in enumerate(index.search(model, texts, lang, k=4, candidates=None)):
            best = expected[row].topk(4)
            assert_hits(hits, [NAMES[i] for i in best.indices.tolist()], best.values.tolist())


def test_candidates_are_the_pooled_cosine_s_best_re_ordered_by_the_token_score(model,
                                                                             image_files):
    index = MediaIndex.from_media(model, image_files, transform=TINY)
    texts = QUERIES['en']
    expected = by_hand_scores(model, image_files, texts, 'en')
    pooled = semantic_texts(model, texts, 'en')[1] @ semantic_media(model, image_files)[1].T
    for row, hits in enumerate(index.search(model, texts, 'en', k=2, candidates=3)):
        shortlist = pooled[row].topk(3).indices
        best = expected[row][shortlist].topk(2)
        assert_hits(hits, [NAMES[shortlist[i]] for i in best.indices.tolist()],
                    best.values.tolist())
    # At least k are re-ranked: candidates below k shortlist k.
    assert index.search(model, texts, 'en', k=3, candidates=1) == index.search(
        model, texts, 'en', k=3, candidates=3)


@pytest.mark.parametrize('candidates', [None, 3])
def test_each_caption_finds_its_image_where_evaluation_ranks_it(model, image_files, candidates):
    """Search and evaluation (``scoring='tokens'`` / ``'tokens_rerank'``) rank alike: a
    caption's image is at the rank ``token_ranks`` gives it, on the same tokens."""
    index = MediaIndex.from_media(model, image_files, transform=TINY)
    media = encode_gallery(model, image_files, transform=TINY, tokens=True)
    # Two captions of each image: image i's are queries 2i and 2i + 1.
    texts = [text for pair in zip(QUERIES['en'][:3] * 2, QUERIES['de'] * 3) for text in pair]
    pooled, tokens = zip(*(encode_text_tokens(model, [text], lang) for text, lang in zip(
        texts, ['en', 'de'] * len(NAMES))))
    caption_media = torch.arange(len(NAMES)).repeat_interleave(2)
    mode = 'tokens' if candidates is None else 'tokens_rerank'
    expected = token_ranks(TokenScoring(model.token_score(), mode, candidates or 1, 'cpu'), 't2i',
                           media.tokens, TokenSet.cat(tokens), media.embeddings,
                           torch.cat(pooled), caption_media)
    depth = len(NAMES) if candidates is None else candidates
    found = [[hit.media_id for hit in index.search(model, text, lang, k=depth,
                                                   candidates=candidates)[0]]
             for text, lang in zip(texts, ['en', 'de'] * len(NAMES))]
    # A positive outside the shortlist ranks past it in evaluation, and is not found here.
    ranks = [hits.index(NAMES[image]) + 1 if NAMES[image] in hits else depth + 1
             for hits, image in zip(found, caption_media.tolist())]
    assert ranks == expected.tolist()
    assert len(set(ranks)) > 1  # not every caption at one rank: the order is checked


def test_a_shortlist_an_approximate_index_leaves_short_or_empty_is_ranked_as_it_is(
        model, image_files, monkeypatch):
    """faiss fills rows it found nothing for with -1: an empty shortlist failed in torch.cat."""
    index = MediaIndex.from_media(model, image_files, transform=TINY)
    found = torch.tensor([[2, -1, -1], [-1, -1, -1]])
    monkeypatch.setattr(index.searcher, 'search',
                        lambda queries, k: (torch.zeros(len(queries), k), found[:, :k]))
    hits = index.search(model, ['a red circle', 'a green triangle'], 'en', k=2, candidates=3)
    assert [[hit.media_id for hit in row] for row in hits] == [['city'], []]


def test_a_token_gallery_grown_shrunk_saved_and_loaded_searches_as_one_built_at_once(
        model, image_files, tmp_path):
    frames = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    grown = MediaIndex.from_media(model, image_files[:3], transform=TINY)
    grown.add_media(model, [*image_files[3:], frames], media_ids=[*NAMES[3:], 'clip'])
    grown.remove(['forest', 'lake'])
    grown.save(tmp_path / 'gallery.idx')
    loaded = MediaIndex.load(tmp_path / 'gallery.idx', model=model)
    kept = [path for path in image_files if path.stem not in ('forest', 'lake')]
    whole = MediaIndex.from_media(model, [*kept, frames],
                                  media_ids=[*(path.stem for path in kept), 'clip'],
                                  transform=TINY)
    assert loaded.media_ids == whole.media_ids
    # The clip's tokens are its frames' (3 x 17), the images' 17: padded, masked.
    assert loaded.tokens.mask.sum(1).tolist() == [17, 17, 17, 17, 51]
    for lang, texts in QUERIES.items():
        expected = whole.search(model, texts, lang, k=5, candidates=None)
        for gallery in (grown, loaded):
            for hits, want in zip(gallery.search(model, texts, lang, k=5, candidates=None),
                                  expected):
                assert_hits(hits, [hit.media_id for hit in want], [hit.score for hit in want])


def test_a_gallery_of_embeddings_and_token_sequences_given_searches_as_one_encoded(
        model, image_files):
    encoded = encode_gallery(model, image_files, transform=TINY, tokens=True)
    sequences = [encoded.tokens.tokens[row][encoded.tokens.mask[row]] for row in range(6)]
    given = MediaIndex(encoded.embeddings[:4], NAMES[:4], tokens=sequences[:4])
    given.add(encoded.embeddings[4:], NAMES[4:], tokens=sequences[4:])
    built = MediaIndex.from_media(model, image_files, transform=TINY)
    texts = QUERIES['en']
    for hits, want in zip(given.search(model, texts, 'en', k=6, candidates=None),
                          built.search(model, texts, 'en', k=6, candidates=None)):
        assert_hits(hits, [hit.media_id for hit in want], [hit.score for hit in want])


def mapped_from(tensor: torch.Tensor, path) -> bool:
    """Whether ``tensor``'s memory lies in a mapping of the file ``path`` (Linux)."""
    address, inode = tensor.data_ptr(), path.stat().st_ino
    for line in open('/proc/self/maps').read().splitlines():
        span, _, _, _, mapped_inode, *_ = line.split()
        start, end = (int(bound, 16) for bound in span.split('-'))
        if start <= address < end:
            return int(mapped_inode) == inode
    return False


@pytest.mark.skipif(not os.path.exists('/proc/self/maps'), reason='reads Linux /proc/self/maps')
def test_a_loaded_gallery_s_tokens_are_read_from_its_file_as_used(model, image_files, tmp_path):
    """Read into memory whole, a COCO-sized gallery's tokens took gigabytes before a search."""
    MediaIndex.from_media(model, image_files, transform=TINY).save(tmp_path / 'gallery.idx')
    loaded = MediaIndex.load(tmp_path / 'gallery.idx')
    assert mapped_from(loaded.tokens.tokens, tmp_path / 'gallery.idx')
    assert not mapped_from(torch.zeros(1000), tmp_path / 'gallery.idx')
    loaded.tokens.tokens[0, 0, 0] = 7.0  # a private mapping: the file keeps what was saved
    assert MediaIndex.load(tmp_path / 'gallery.idx').tokens.tokens[0, 0, 0] != 7.0
    hits = loaded.search(model, 'a red circle', 'en', k=3)
    loaded.save(tmp_path / 'gallery.idx')  # over the file it is mapped from
    assert MediaIndex.load(tmp_path / 'gallery.idx').search(model, 'a red circle', 'en',
                                                            k=3) == hits


def test_tokens_are_kept_in_the_parts_and_parts_without_them_are_refused(model, image_files,
                                                                        tmp_path):
    first = MediaIndex.from_media(model, image_files[:3], transform=TINY,
                                  parts=tmp_path / 'parts', part_size=2)
    again = MediaIndex.from_media(model, image_files, transform=TINY, parts=tmp_path / 'parts',
                                  part_size=2)
    whole = MediaIndex.from_media(model, image_files, transform=TINY)
    assert torch.equal(again.tokens.tokens[:3], first.tokens.tokens)
    torch.testing.assert_close(again.tokens.tokens, whole.tokens.tokens, rtol=0, atol=1e-6)
    # Parts holding more media than asked for (an earlier, larger gallery's) give the tokens
    # of those asked for alone, in their order.
    fewer = MediaIndex.from_media(model, image_files[3:1:-1], transform=TINY,
                                  parts=tmp_path / 'parts', part_size=2)
    assert fewer.media_ids == whole.media_ids[3:1:-1]
    assert torch.equal(fewer.tokens.tokens, again.tokens.tokens[[3, 2]])
    MediaIndex.from_media(model, image_files, transform=TINY, parts=tmp_path / 'pooled',
                          tokens=False)
    with pytest.raises(ValueError, match=re.escape(
            'its media were encoded with media_tokens None, this encoding has True')):
        MediaIndex.from_media(model, image_files, transform=TINY, parts=tmp_path / 'pooled')


def test_a_gallery_without_tokens_is_ranked_by_the_pooled_cosine_and_says_so(model, image_files,
                                                                            tmp_path):
    """As is an index saved before galleries kept tokens (format /1)."""
    pooled = MediaIndex.from_media(model, image_files, transform=TINY, tokens=False)
    assert pooled.tokens is None and pooled.encoded_by['media_tokens'] is False
    assert not pooled.ranks_by_tokens(model)
    texts = QUERIES['de']
    cosine = semantic_texts(model, texts, 'de')[1] @ semantic_media(model, image_files)[1].T
    with warnings.catch_warnings():  # left out on purpose: nothing to warn of
        warnings.simplefilter('error')
        hits = pooled.search(model, texts, 'de', k=3)
    for row, query_hits in enumerate(hits):
        best = cosine[row].topk(3)
        assert_hits(query_hits, [NAMES[i] for i in best.indices.tolist()], best.values.tolist())
    tokens = MediaIndex.from_media(model, image_files, transform=TINY)
    tokens.save(tmp_path / 'gallery.idx')
    state = torch.load(tmp_path / 'gallery.idx', weights_only=True)
    del state['media_tokens']
    torch.save({**state, 'format': 'xmr-media-index/1'}, tmp_path / 'old.idx')
    old = MediaIndex.load(tmp_path / 'old.idx', model=model)
    assert old.tokens is None
    with pytest.warns(UserWarning, match=re.escape(
            'this gallery keeps no media tokens (saved before xmr kept them, or built of '
            'embeddings given): it is ranked by the pooled cosine, not by the token score '
            'DualEncoderRetriever is evaluated with')):
        assert old.search(model, texts, 'de', k=3) == hits
    with pytest.warns(UserWarning, match='keeps no media tokens'):
        MediaIndex(pooled.searcher.index.reconstruct_n(0, len(pooled)), pooled.media_ids).search(
            model, texts, 'de', k=3)
    # Embeddings searched directly are ranked by their cosine, tokens or none.
    assert tokens.search_embeddings(encode_texts(model, texts, 'de'), k=3) == hits


def test_what_a_token_gallery_cannot_take_is_named(model, image_files, tmp_path):
    pooled_model = MODELS.build(dual_encoder_cfg()).eval()
    with pytest.raises(ValueError, match=re.escape(
            'DualEncoderRetriever scores media and captions by the cosine of their embeddings '
            "(its token_score() is None): it has no retrieval tokens to keep")):
        MediaIndex.from_media(pooled_model, image_files, transform=TINY, tokens=True)
    pooled_model.token_score = model.token_score  # a score its predict emits no tokens for
    with pytest.raises(ValueError, match=re.escape(
            'DualEncoderRetriever.token_score() scores pairs from their tokens, but its predict '
            'emits no media_tokens: emit them')):
        MediaIndex.from_media(pooled_model, image_files, transform=TINY)
    with pytest.raises(ValueError, match='its predict emits no caption_tokens'):
        encode_text_tokens(pooled_model, 'a red circle', 'en')
    index = MediaIndex.from_media(model, image_files[:2], transform=TINY)
    with pytest.raises(ValueError, match="this gallery keeps its media's retrieval tokens: give "
                                         "the new media's as tokens"):
        index.add(torch.eye(1, 32), ['x'])
    with pytest.raises(ValueError, match='tokens hold 2 token sequences for 1 media'):
        index.add(torch.eye(1, 32), ['x'], tokens=index.tokens)
    with pytest.raises(ValueError, match='this gallery keeps no retrieval tokens'):
        MediaIndex(torch.eye(2, 32), ['a', 'b']).add(torch.eye(1, 32), ['x'],
                                                     tokens=index.tokens.select(slice(0, 1)))
    assert index.media_ids == ['beach', 'forest'] and len(index.tokens) == 2
    with pytest.raises(ValueError, match='candidates must be a positive whole number, got 0'):
        index.search(model, 'a red circle', 'en', candidates=0)
    index.save(tmp_path / 'gallery.idx')
    state = torch.load(tmp_path / 'gallery.idx', weights_only=True)
    state['media_tokens'] = {key: value[:1] for key, value in state['media_tokens'].items()}
    torch.save(state, tmp_path / 'gallery.idx')
    with pytest.raises(ValueError, match=re.escape(
            f"{tmp_path / 'gallery.idx'}: a damaged media index: it holds the tokens of 1 media "
            'and names 2; build it again')):
        MediaIndex.load(tmp_path / 'gallery.idx')


def test_a_nan_token_score_is_named_by_query_and_media(model, image_files):
    index = MediaIndex.from_media(model, image_files[:3], transform=TINY)
    index.tokens.tokens[1, 0] = float('nan')
    with pytest.raises(ValueError, match=re.escape(
            "query 0: the token score is NaN for media ['forest']: a NaN score has no rank")):
        index.search(model, 'a red circle', 'en', candidates=None)


#: How far a patch-word score of float16-stored media tokens may be from float32's. Rounding
#: to float16 (an 11-bit significand) moves each element x to x(1 + d), |d| <= u = 2^-11, so a
#: patch p moves by e with ||e|| <= u ||p||, and its unit vector by at most 2u; a cosine with a
#: unit word moves by at most 2u (Cauchy-Schwarz), and so do each word's best patch (a max)
#: and their mean. The rest is float32's own rounding of the D-term products (~1e-6).
FLOAT16_SCORE_TOLERANCE = 2 * 2 ** -11 + 1e-5


def scores_by_media(index, model, texts, lang):
    """``[Q, N]`` token scores of the whole gallery, columns in the gallery's media order."""
    hits = index.search(model, texts, lang, k=len(index), candidates=None)
    return torch.tensor([[{hit.media_id: hit.score for hit in row}[media_id]
                          for media_id in index.media_ids] for row in hits])


def test_a_float16_store_halves_the_tokens_and_scores_within_its_rounding(model, image_files,
                                                                        tmp_path):
    full = MediaIndex.from_media(model, image_files, transform=TINY)
    half = MediaIndex.from_media(model, image_files, transform=TINY, token_dtype=torch.float16)
    assert (full.token_dtype, half.token_dtype) == (torch.float32, torch.float16)
    assert half.tokens.tokens.dtype == torch.float16 and 'media tokens (float16)' in repr(half)
    # The same encodings, rounded once.
    assert torch.equal(half.tokens.tokens, full.tokens.tokens.half())
    assert torch.equal(half.tokens.mask, full.tokens.mask)
    full.save(tmp_path / 'full.idx')
    half.save(tmp_path / 'half.idx')
    # The files differ by half the tokens' bytes, give or take the archive's 64-byte alignment.
    saved = (tmp_path / 'full.idx').stat().st_size - (tmp_path / 'half.idx').stat().st_size
    assert abs(saved - 2 * full.tokens.tokens.numel()) <= 64
    loaded = MediaIndex.load(tmp_path / 'half.idx', model=model)
    assert loaded.token_dtype == torch.float16
    assert torch.equal(loaded.tokens.tokens, half.tokens.tokens)
    for lang, texts in QUERIES.items():
        exact = scores_by_media(full, model, texts, lang)
        rounded = scores_by_media(loaded, model, texts, lang)
        error = (rounded - exact).abs().max()
        assert 0 < error <= FLOAT16_SCORE_TOLERANCE  # rounded, and no further than derived
        # Where a query's scores are further apart than twice the tolerance, their order is
        # float32's: the media are ranked alike.
        gaps = exact.sort(dim=1, descending=True).values.diff(dim=1).abs()
        separated = (gaps > 2 * FLOAT16_SCORE_TOLERANCE).all(dim=1)
        assert separated.any()  # some query checks the order
        assert torch.equal(rounded[separated].argsort(dim=1, descending=True),
                           exact[separated].argsort(dim=1, descending=True))


@pytest.mark.parametrize('parts', [False, True])
def test_a_float16_gallery_is_converted_as_it_is_encoded(model, image_files, tmp_path,
                                                         monkeypatch, parts):
    """Each media's tokens are converted as they come (into the gallery's one buffer, or from
    the part encoded or read): no float32 copy of the gallery's tokens is ever held whole, the
    peak of a float32 set converted at the end. The parts keep the model's float32."""
    held = []
    for kind, name in ((TokenSetWriter, 'finish'), (TokenSet, 'stack')):
        original = getattr(kind, name)

        def spy(*args, _original=original, **kwargs):
            made = _original(*args, **kwargs)
            held.append(made.tokens.dtype)
            return made

        monkeypatch.setattr(kind, name, spy)
    options = dict(parts=tmp_path / 'parts', part_size=2) if parts else {}
    half = MediaIndex.from_media(model, image_files, transform=TINY, batch_size=2,
                                 token_dtype=torch.float16, **options)
    assert held == [torch.float16]  # one set made, float16 from its first media on
    full = MediaIndex.from_media(model, image_files, transform=TINY, batch_size=2)
    assert torch.equal(half.tokens.tokens, full.tokens.tokens.half())
    if parts:
        assert {media.tokens.dtype for media in EncodingParts(
            tmp_path / 'parts', media_encoding(model, TINY, 12, True)).read().values()} == {
                torch.float32}


def test_tokens_added_to_a_float16_gallery_are_stored_as_its_own(model, image_files, tmp_path):
    """Converted, not refused: a model encodes in float32, and its gallery grown is as one built
    at once (parts, which keep the model's float32 tokens, too)."""
    whole = MediaIndex.from_media(model, image_files, transform=TINY, token_dtype=torch.float16)
    grown = MediaIndex.from_media(model, image_files[:2], transform=TINY,
                                  token_dtype=torch.float16)
    grown.add_media(model, image_files[2:4])
    grown.save(tmp_path / 'grown.idx')
    loaded = MediaIndex.load(tmp_path / 'grown.idx')  # its tokens mapped from the file
    encoded = encode_gallery(model, image_files[4:], transform=TINY, tokens=True)
    loaded.add(encoded.embeddings, NAMES[4:], tokens=encoded.tokens)
    assert loaded.media_ids == whole.media_ids and loaded.token_dtype == torch.float16
    assert torch.equal(loaded.tokens.tokens, whole.tokens.tokens)
    MediaIndex.from_media(model, image_files[:3], transform=TINY, parts=tmp_path / 'parts')
    resumed = MediaIndex.from_media(model, image_files, transform=TINY, parts=tmp_path / 'parts',
                                    token_dtype=torch.float16)
    torch.testing.assert_close(resumed.tokens.tokens, whole.tokens.tokens, rtol=0, atol=0)
    sequences = [encoded.tokens.tokens[row][encoded.tokens.mask[row]] for row in range(2)]
    given = MediaIndex(encoded.embeddings, NAMES[4:], tokens=sequences,
                       token_dtype=torch.float16)
    assert torch.equal(given.tokens.tokens, whole.tokens.tokens[4:])
    assert given.tokens.select(slice(0, 1)).tokens.dtype == torch.float16
    assert TokenSet.cat([given.tokens, given.tokens]).tokens.dtype == torch.float16


def test_a_float16_gallery_is_scored_in_float32_a_block_at_a_time(model, image_files):
    """Only the blocks scored are upcast, whatever the score function does with its inputs."""
    index = MediaIndex.from_media(model, image_files, transform=TINY, token_dtype=torch.float16)
    blocks = []

    def recorded(image_tokens, image_mask, text_tokens, text_mask):
        blocks.append((image_tokens.dtype, text_tokens.dtype, len(image_tokens)))
        return model.token_score()(image_tokens, image_mask, text_tokens, text_mask)

    _, tokens = encode_text_tokens(model, QUERIES['en'], 'en')
    budget = 2 * index.tokens.tokens.shape[1] * tokens.tokens.shape[1]  # two media a block
    scores = pairwise_token_scores(recorded, index.tokens, tokens, budget=budget)
    assert {(image, text) for image, text, _ in blocks} == {(torch.float32, torch.float32)}
    assert max(rows for *_, rows in blocks) == 1  # isqrt(2): one media a block
    assert index.tokens.tokens.dtype == torch.float16 and scores.dtype == torch.float32


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float64, 'float16'])
def test_a_token_dtype_other_than_float32_or_float16_is_refused(model, image_files, dtype):
    with pytest.raises(ValueError, match=re.escape(
            f'token_dtype must be torch.float32 or torch.float16, got {dtype!r}')):
        MediaIndex.from_media(model, image_files[:1], transform=TINY, token_dtype=dtype)


def test_tokens_float16_cannot_hold_are_refused_naming_their_media(model, image_files):
    encoded = encode_gallery(model, image_files[:3], transform=TINY, tokens=True)
    encoded.tokens.tokens[1, 0, 0] = 70000.0  # float16 rounds it to infinity
    sequences = [encoded.tokens.tokens[row][encoded.tokens.mask[row]] for row in range(3)]
    for given in (encoded.tokens, sequences):  # converted, or stacked as float16
        with pytest.raises(ValueError, match=re.escape(
                "the retrieval tokens of media ['forest'] hold values beyond float16's range "
                '(+-65504), or infinite ones: they would score NaN; store the tokens in '
                'float32')):
            MediaIndex(encoded.embeddings, NAMES[:3], tokens=given, token_dtype=torch.float16)
    assert len(MediaIndex(encoded.embeddings, NAMES[:3], tokens=encoded.tokens).tokens) == 3


def assert_same_sequences(tokens, expected):
    """Each row of a padded set holds the sequence ``expected`` gives for it, and no more."""
    assert len(tokens) == len(expected)
    for row, sequence in enumerate(expected):
        assert int(tokens.mask[row].sum()) == sequence.shape[0], row
        torch.testing.assert_close(tokens.tokens[row][tokens.mask[row]], sequence,
                                   atol=1e-5, rtol=1e-5, msg=f'row {row}')


def test_the_text_tokens_of_every_batch_are_kept_in_input_order(model):
    """Encoded two texts at a time, the three texts' tokens are each text's own semantic
    tokens, in order: none of an earlier batch's lost behind a later one."""
    texts = QUERIES['en']
    embeddings, tokens = encode_text_tokens(model, texts, 'en', batch_size=2)
    words, pooled = semantic_texts(model, texts, 'en')
    torch.testing.assert_close(embeddings, pooled, atol=1e-5, rtol=1e-5)
    assert_same_sequences(tokens, words)


def test_a_gallery_s_tokens_are_each_read_media_s_own_in_order_around_a_skipped_one(
        model, image_files):
    """Two media a batch, the third file unreadable: the five media read keep their own
    semantic tokens, in input order, and the skipped one has no row (its row neither filled
    with another's tokens nor left empty)."""
    image_files[2].write_bytes(b'')
    with pytest.warns(MediaSkippedWarning):
        encoded = encode_gallery(model, image_files, transform=TINY, batch_size=2,
                                 on_corrupt='skip', tokens=True)
    read = image_files[:2] + image_files[3:]
    patches, pooled = semantic_media(model, read)
    assert [marker.index for marker in encoded.skipped] == [2]
    torch.testing.assert_close(encoded.embeddings, pooled, atol=1e-5, rtol=1e-5)
    assert_same_sequences(encoded.tokens, patches)


@pytest.mark.parametrize('candidates', [None, 3])
def test_a_bad_k_is_refused_when_ranking_by_the_token_score(model, image_files, candidates):
    """k was checked on the pooled cosine's path alone: ranked by tokens, k=0 would give
    every query no hit, silently."""
    index = MediaIndex.from_media(model, image_files[:3], transform=TINY)
    for k in (0, 2.5, True):
        with pytest.raises(ValueError, match=rf'^k must be a positive whole number, got {k!r}$'):
            index.search(model, 'a red circle', 'en', k=k, candidates=candidates)


def test_a_gallery_with_tokens_searched_by_its_token_model_warns_of_nothing(model, image_files):
    """The warning of a gallery ranked by the pooled cosine is for galleries without tokens
    alone: one ranked by the token score, as evaluation ranks, has nothing to warn of."""
    index = MediaIndex.from_media(model, image_files[:3], transform=TINY)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        index.search(model, 'a red circle', 'en', k=2)
        index.search(model, 'a red circle', 'en', k=2, candidates=None)


def test_media_of_equal_token_scores_keep_the_gallery_s_or_the_pooled_cosine_s_order(
        model, image_files):
    """24 media holding one image's tokens score alike for any query. Their order is the
    gallery's for the whole gallery scored, and the pooled cosine's (the faiss index's) for a
    shortlist: torch's CPU sort without ``stable`` reorders ties from 17 elements on."""
    encoded = encode_gallery(model, image_files[:1], transform=TINY, tokens=True)
    count = 24
    sequence = encoded.tokens.tokens[0][encoded.tokens.mask[0]]
    embeddings = torch.randn(count, encoded.embeddings.shape[1],
                             generator=torch.Generator().manual_seed(0))
    ids = [f'media{row}' for row in range(count)]
    index = MediaIndex(embeddings, ids, tokens=[sequence] * count)
    whole = index.search(model, 'a red circle', 'en', k=count, candidates=None)[0]
    assert len({hit.score for hit in whole}) == 1  # every media ties
    assert [hit.media_id for hit in whole] == ids
    by_cosine = [hit.media_id for hit in index.search_embeddings(
        encode_texts(model, 'a red circle', 'en'), k=count)[0]]
    assert by_cosine != ids  # the two orders differ: each is checked
    shortlisted = index.search(model, 'a red circle', 'en', k=count, candidates=count)[0]
    assert [hit.media_id for hit in shortlisted] == by_cosine


def test_a_nan_token_score_in_a_shortlist_names_its_media_not_its_place_in_the_shortlist(
        model, image_files, monkeypatch):
    """A shortlist's scores are in its own order (here city, beach, forest): the media named
    is the gallery's media of that row, not the gallery's media at the score's position."""
    index = MediaIndex.from_media(model, image_files[:3], transform=TINY)
    index.tokens.tokens[2, 0] = float('nan')
    monkeypatch.setattr(index.searcher, 'search',
                        lambda queries, k: (torch.zeros(len(queries), k),
                                            torch.tensor([[2, 0, 1]])[:, :k]))
    with pytest.raises(ValueError, match=re.escape(
            "query 0: the token score is NaN for media ['city']: a NaN score has no rank")):
        index.search(model, 'a red circle', 'en', k=2, candidates=3)


def test_tokens_float16_cannot_hold_are_named_in_every_block_checked():
    """The check runs 1024 media at a time: media at the end of the first block and inside the
    second are named, by their own ids (not their place in their block)."""
    count = 1030
    tokens = torch.ones(count, 1, 4)
    tokens[[1023, 1027], 0, 1] = 70000.0  # float16 rounds it to infinity
    ids = [f'media{row}' for row in range(count)]
    with pytest.raises(ValueError, match=re.escape(
            "the retrieval tokens of media ['media1023', 'media1027'] hold values beyond "
            "float16's range")):
        MediaIndex(torch.randn(count, 4), ids, tokens=list(tokens), token_dtype=torch.float16)


def test_a_gallery_built_with_tokens_records_that_it_keeps_them(model, image_files):
    """encoded_by says what the embeddings depend on, and media_tokens True that the gallery
    keeps its media's tokens (False where a token model's gallery was built without)."""
    index = MediaIndex.from_media(model, image_files[:2], transform=TINY)
    assert index.encoded_by == media_encoding(model, TINY, 12, tokens=True)
    assert index.encoded_by['media_tokens'] is True
