import pytest
import torch

from tests.conftest import SHARED_DATA
from xmr.models.language import cclm_tokenizer
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
    # Nothing left (two of XTD10's German captions are '?'), where pre_caption raises.
    ('?! ...', ''),
])
def test_clean_caption_matches_cclm_pre_caption(raw, cleaned):
    assert clean_caption(raw) == cleaned


def test_clean_caption_keeps_thirty_words():
    words = [f'w{i}' for i in range(35)]
    assert clean_caption(' '.join(words)) == ' '.join(words[:30])
    assert clean_caption(' '.join(words), max_words=3) == 'w0 w1 w2'


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


def test_a_caption_that_cleaning_empties_is_refused_as_cclm_refuses_it(tokenizer):
    with pytest.raises(ValueError, match=r"caption '\?' is empty after CCLM's caption cleaning "
                       r"\(punctuation removed\), which CCLM's pre_caption refuses too; "
                       'correct or drop it in the annotation file'):
        tokenizer(['ein hund', '?'])


def test_an_evaluation_caption_that_cleaning_empties_is_the_empty_text(monkeypatch):
    """XTD10's protocols rank 1,000 German captions, two of them '?': an evaluation batch
    encodes them as <s></s> (0, 2), what XLM-R's tokenizer gives CCLM's cleaned '', and each
    batch says how many it encoded so."""
    if not TOKENIZER_FILE.is_file():
        pytest.skip(f'real XLM-R tokenizer not found at {TOKENIZER_FILE}')
    tokenizer = CCLMTokenizer(tokenizer_file=str(TOKENIZER_FILE))  # its own count
    logged = []
    monkeypatch.setattr(cclm_tokenizer, 'print_log', lambda message, **_: logged.append(message))
    batch = tokenizer.evaluation_batch(['Ein Hund läuft.', '?', '"..."'], ['de'] * 3)
    dog = tokenizer.encode('ein hund läuft')
    pad = tokenizer.pad_id
    assert batch['input_ids'].tolist() == [dog, [0, 2] + [pad] * (len(dog) - 2),
                                           [0, 2] + [pad] * (len(dog) - 2)]
    assert batch['eos_index'].tolist() == [len(dog) - 1, 1, 1]
    assert batch['attention_mask'].sum(1).tolist() == [len(dog), 2, 2]
    assert logged == [
        "CCLMTokenizer: CCLM's caption cleaning left nothing of 2 of the 3 evaluation captions "
        "in a batch ('?' (de), '\"...\"' (de)); each is encoded as the empty text <s></s> and "
        'ranked, so the protocol keeps its count of captions (2 so far in this process, '
        'tokenizer.emptied)']
    # A batch without such a caption is a plain call's, and says nothing.
    plain = tokenizer.evaluation_batch(['Ein Hund läuft.', 'zwei Kinder'], ['de', 'de'])
    assert torch.equal(plain['input_ids'],
                       tokenizer(['Ein Hund läuft.', 'zwei Kinder'])['input_ids'])
    tokenizer.evaluation_batch(['?'], ['de'])
    assert len(logged) == 2 and logged[1].endswith('(3 so far in this process, '
                                                   'tokenizer.emptied)')
