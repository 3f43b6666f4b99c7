import pytest

from tests.conftest import SHARED_DATA
from xmr.models.language.cclm_tokenizer import CCLMTokenizer, clean_caption

TOKENIZER_FILE = SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json'


@pytest.mark.parametrize('raw, cleaned', [
    ('A man, riding a horse!', 'a man riding a horse'),
    ('  <person> on a mountain-bike/trail.\n', 'person on a mountain bike trail'),
    ('"Two" (small) dogs: #1 & #2; ok?', 'two small dogs 1 & 2 ok'),
    ('Ein Mann fährt Fahrrad.', 'ein mann fährt fahrrad'),
    ('一个男人在骑马。', '一个男人在骑马。'),
    # Each character of CCLM's punctuation class, [,.'!?"()*#:;~], becomes a space.
    ('a,b.c\'d!e?f"g(h)i*j#k:l;m~n', 'a b c d e f g h i j k l m n'),
])
def test_clean_caption_matches_cclm_pre_caption(raw, cleaned):
    assert clean_caption(raw) == cleaned


def test_clean_caption_keeps_thirty_words():
    words = [f'w{i}' for i in range(35)]
    assert clean_caption(' '.join(words)) == ' '.join(words[:30])
    assert clean_caption(' '.join(words), max_words=3) == 'w0 w1 w2'


def test_caption_of_only_punctuation_is_refused():
    with pytest.raises(ValueError, match=r"caption '\?! \.\.\.' is empty"):
        clean_caption('?! ...')


@pytest.fixture(scope='module')
def tokenizer():
    if not TOKENIZER_FILE.is_file():
        pytest.skip(f'real XLM-R tokenizer not found at {TOKENIZER_FILE}')
    return CCLMTokenizer(tokenizer_file=str(TOKENIZER_FILE))


def test_tokenizer_cleans_before_xlmr_pieces(tokenizer):
    assert tokenizer.encode('A Man, riding a HORSE!') == tokenizer.encode('a man riding a horse')
    # '▁a' is piece 10 of XLM-R; <s> = 0 and </s> = 2 frame every caption.
    assert tokenizer.encode(' '.join(['a'] * 35)) == [0] + [10] * 30 + [2]


def test_tokenizer_truncates_to_forty_tokens_keeping_the_end_token(tokenizer):
    caption = ' '.join(['Donaudampfschifffahrtsgesellschaftskapitän'] * 30)
    batch = tokenizer([caption, 'ein hund'])
    assert batch['input_ids'].shape == (2, 40)
    assert batch['input_ids'][0, -1] == 2 and batch['eos_index'].tolist() == [39, 3]
    assert batch['input_ids'][1, 4:].eq(tokenizer.pad_id).all() and tokenizer.pad_id == 1
