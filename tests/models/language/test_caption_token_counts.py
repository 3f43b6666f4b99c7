"""Per-language caption token counts: tokens per caption, captions cut, unknown pieces."""
from __future__ import annotations

import pytest

from tests.conftest import SHARED_DATA
from xmr.models.data_preprocessor import RetrievalDataPreprocessor
from xmr.models.language.caption_token_counts import (
    CaptionTokenCounts,
    caption_token_table,
    count_caption_tokens,
)
from xmr.models.language.tokenizers import BaseTokenizer, OpenCLIPTokenizer

XLMR_FILE = SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json'


class WordTokenizer(BaseTokenizer):
    """``[1] word ids [2]``: one id per known word, 3 (unknown) for any other."""

    unk = 3
    words = {'red': 4, 'blue': 5, 'circle': 6, 'square': 7}

    @property
    def vocab_size(self) -> int:
        return 8

    @property
    def pad_id(self) -> int:
        return 0

    @property
    def unk_id(self) -> int:
        return self.unk

    def encode(self, text: str) -> list[int]:
        return [1, *(self.words.get(word, self.unk) for word in text.split()), 2]


def test_counts_are_the_tokens_a_caption_takes_with_its_specials():
    # Words 1, 2, 3, 6: tokens with the two specials 3, 4, 5, 8 (two above 4); pieces 12, of
    # which unknown: moon, big, a, in, a, box.
    captions = ['red', 'red moon', 'blue big square', 'a red circle in a box']
    counts = count_caption_tokens(WordTokenizer(max_length=4), captions, 'xx')
    assert counts == CaptionTokenCounts(lang='xx', captions=4, mean_tokens=5.0, p95_tokens=8,
                                        max_tokens=8, context=4, cut=2, pieces=12, unknown=6)
    assert (counts.cut_share, counts.unknown_share) == (0.5, 0.5)


def test_the_95th_percentile_is_the_nearest_rank():
    # Twenty captions of 1..20 words: 3..22 tokens; rank ceil(0.95 * 20) = 19 holds 21 tokens.
    captions = [' '.join(['red'] * n) for n in range(20, 0, -1)]
    counts = count_caption_tokens(WordTokenizer(max_length=77), captions, 'xx')
    assert (counts.p95_tokens, counts.max_tokens, counts.cut, counts.unknown) == (21, 22, 0, 0)


def test_a_tokenizer_without_an_unknown_token_counts_none():
    counts = count_caption_tokens(OpenCLIPTokenizer(), ['a red circle'], 'en')
    assert counts.unknown is None and counts.unknown_share is None
    assert counts.pieces == counts.mean_tokens - 2  # CLIP's start and end tokens


def test_no_captions_are_refused_naming_the_language():
    with pytest.raises(ValueError, match="no 'ko' captions to count"):
        count_caption_tokens(WordTokenizer(), [], 'ko')


def test_the_captions_cut_are_those_evaluation_truncates(shared_data):
    """XTD10's Russian captions through CLIP's BPE: 101 of the 1,000 are longer than its 77
    tokens, where no English one is; the count is the tokenizer's own truncation count of an
    evaluation batch of the same captions."""
    tokenizer = OpenCLIPTokenizer()
    counted = {}
    for lang in ('en', 'ru'):
        captions = (shared_data / 'xtd10' / f'test_1kcaptions_{lang}.txt').read_text(
            encoding='utf-8').splitlines()
        counted[lang] = count_caption_tokens(tokenizer, captions, lang)
        before = tokenizer.truncated
        batch = tokenizer.evaluation_batch(captions, [lang] * len(captions))
        assert counted[lang].cut == tokenizer.truncated - before
        assert counted[lang].max_tokens >= int(batch['attention_mask'].sum(1).max())
    assert (counted['en'].cut, counted['ru'].cut) == (0, 101)
    assert counted['ru'].mean_tokens / counted['en'].mean_tokens == pytest.approx(3.43, abs=0.01)


def test_a_caption_cclm_s_cleaning_empties_counts_as_the_empty_text_evaluation_encodes():
    if not XLMR_FILE.is_file():
        pytest.skip(f'real XLM-R tokenizer not found at {XLMR_FILE}')
    from xmr.models.language.cclm_tokenizer import CCLMTokenizer

    tokenizer = CCLMTokenizer(tokenizer_file=str(XLMR_FILE))
    counts = count_caption_tokens(tokenizer, ['?', 'ein Mann'], 'de')
    assert counts.max_tokens == len(tokenizer.encode('ein Mann'))
    assert counts.mean_tokens == (2 + counts.max_tokens) / 2  # '?' as <s></s>
    batch = tokenizer.evaluation_batch(['?', 'ein Mann'], ['de', 'de'])
    assert batch['attention_mask'].sum(1).tolist() == [2, counts.max_tokens]


def test_the_model_s_count_reads_the_source_prompt_and_each_language_s_tokenizer():
    preprocessor = RetrievalDataPreprocessor(source_prompt='a red square')
    preprocessor.bind(WordTokenizer(max_length=5), WordTokenizer(max_length=3), None, None)
    source = preprocessor.count_caption_tokens(['blue circle'], 'en')
    target = preprocessor.count_caption_tokens(['blue circle'], 'de')
    assert (source.mean_tokens, source.context, source.cut) == (7, 5, 1)
    assert (target.mean_tokens, target.context, target.cut) == (4, 3, 1)


def test_a_dataset_s_counts_are_of_each_language_it_holds_captions_in():
    """A dataset is read item by item for each language's captions (``limit``: the first N);
    a language it has none in gets no row, and one that exposes no captions is refused."""
    from xmr.datasets.dataset_captions import NoCaptions

    class Items:
        captions = [{'en': ['red circle', 'blue'], 'de': ['rot']}, {'en': ['square']}]

        def __len__(self) -> int:
            return len(self.captions)

        def captions_of(self, index: int) -> dict[str, list[str]]:
            return self.captions[index]

    preprocessor = RetrievalDataPreprocessor()
    preprocessor.bind(WordTokenizer(max_length=3), WordTokenizer(max_length=2), None, None)
    counts = preprocessor.count_dataset_caption_tokens(Items(), ['en', 'de', 'fr'])
    assert list(counts) == ['en', 'de']
    assert (counts['en'].captions, counts['en'].mean_tokens, counts['en'].cut) == (3, 10 / 3, 1)
    assert (counts['de'].captions, counts['de'].context, counts['de'].cut) == (1, 2, 1)
    first = preprocessor.count_dataset_caption_tokens(Items(), ['en'], limit=1)
    assert (first['en'].captions, first['en'].cut) == (1, 1)
    with pytest.raises(NoCaptions, match='exposes neither annotation records nor captions_of'):
        preprocessor.count_dataset_caption_tokens(object(), ['en'])


def test_the_table_sets_each_language_beside_the_source():
    rows = [CaptionTokenCounts('en', 1000, 15.8, 22, 48, 77, 0, 13800, None),
            CaptionTokenCounts('ru', 1000, 54.2, 87, 219, 77, 101, 52200, 261)]
    assert caption_token_table(rows, 'en').splitlines() == [
        '| language | captions | tokens per caption | x en | p95 | longest | context | cut (%) '
        '| unknown (%) |',
        '|---|---|---|---|---|---|---|---|---|',
        '| en | 1,000 | 15.8 | 1.00 | 22 | 48 | 77 | 0.00 | - |',
        '| ru | 1,000 | 54.2 | 3.43 | 87 | 219 | 77 | 10.10 | 0.50 |']
    assert 'x en' not in caption_token_table(rows[1:], 'en')
