"""Dynamic padding gives the embeddings of fixed 77-style padding, at any length up to context."""
import pytest
import torch

from tests.conftest import TINY_CLIP
from xmr.models.language.tokenizers import TokenBatch, pad_batch
from xmr.registry import TOKENIZERS

CAPTIONS = ['a red circle', 'two blue squares on the left of a big green triangle', 'one']
TARGETS = ['ein roter Kreis', '两个蓝色的正方形在左边', 'drei grüne Dreiecke oben']
CONTEXT = TINY_CLIP['text_cfg']['context_length']


def test_pad_batch_pads_to_the_longest_or_to_a_fixed_length():
    dynamic = pad_batch([[5, 6, 7], [5, 9]], pad_id=0)
    assert dynamic['input_ids'].tolist() == [[5, 6, 7], [5, 9, 0]]
    fixed = pad_batch([[5, 6, 7], [5, 9]], pad_id=0, pad_to=6)
    assert fixed['input_ids'].tolist() == [[5, 6, 7, 0, 0, 0], [5, 9, 0, 0, 0, 0]]
    assert fixed['attention_mask'].sum(1).tolist() == [3, 2]
    assert fixed['eos_index'].tolist() == dynamic['eos_index'].tolist() == [2, 1]


def test_pad_to_shorter_than_a_caption_or_max_length_is_refused():
    with pytest.raises(ValueError, match='4 tokens does not fit pad_to=3'):
        pad_batch([[1, 2, 3, 4]], pad_id=0, pad_to=3)
    with pytest.raises(ValueError, match='pad_to=10 is shorter than max_length=77'):
        TOKENIZERS.build(dict(type='OpenCLIPTokenizer', pad_to=10))


def test_tokenizer_pad_to_gives_fixed_width_batches():
    tokenizer = TOKENIZERS.build(dict(type='OpenCLIPTokenizer', pad_to=77))
    batch = tokenizer(CAPTIONS)
    assert batch['input_ids'].shape == (3, 77)
    dynamic = TOKENIZERS.build(dict(type='OpenCLIPTokenizer'))(CAPTIONS)
    assert dynamic['input_ids'].shape[1] == int(dynamic['attention_mask'].sum(1).max()) < 77
    torch.testing.assert_close(batch['input_ids'][:, :dynamic['input_ids'].shape[1]],
                               dynamic['input_ids'])


@pytest.mark.parametrize('multiple, widths', [(8, [8, 8, 16, 24, 77, 77]),
                                              (1, [3, 8, 9, 17, 73, 77])])
def test_pad_to_multiple_of_rounds_the_longest_caption_up_within_max_length(multiple, widths):
    tokenizer = TOKENIZERS.build(dict(type='OpenCLIPTokenizer', pad_to_multiple_of=multiple))
    # 'one' and a caption of n words: n + 2 tokens with the start and end tokens, at most 77.
    for words, width in zip((1, 6, 7, 15, 71, 200), widths, strict=True):
        batch = tokenizer(['one', 'a' + ' a' * (words - 1)])
        assert batch['input_ids'].shape[1] == width, words
    dynamic = TOKENIZERS.build(dict(type='OpenCLIPTokenizer'))(CAPTIONS)
    bucketed = tokenizer(CAPTIONS)
    length = dynamic['input_ids'].shape[1]
    torch.testing.assert_close(bucketed['input_ids'][:, :length], dynamic['input_ids'])
    assert not bucketed['attention_mask'][:, length:].any()
    assert bucketed['eos_index'].tolist() == dynamic['eos_index'].tolist()


def test_pad_to_multiple_of_with_pad_to_or_below_one_is_refused():
    for options in (dict(pad_to=77, pad_to_multiple_of=8), dict(pad_to_multiple_of=0)):
        with pytest.raises(ValueError, match='give a multiple of at least 1 without pad_to'):
            TOKENIZERS.build(dict(type='OpenCLIPTokenizer', **options))


def _padded(tokens: TokenBatch, length: int, pad_id: int) -> TokenBatch:
    ids = tokens['input_ids']
    extra = length - ids.shape[1]
    return TokenBatch(
        input_ids=torch.cat([ids, ids.new_full((ids.shape[0], extra), pad_id)], 1),
        attention_mask=torch.cat([tokens['attention_mask'],
                                  tokens['attention_mask'].new_zeros(ids.shape[0], extra)], 1),
        eos_index=tokens['eos_index'])


def test_source_tower_gives_the_same_embedding_padded_to_context(tiny_retriever):
    backbone = tiny_retriever.backbone
    tokens = backbone.tokenizer(CAPTIONS)
    with torch.no_grad():
        dynamic = backbone.encode_source_text(tokens)
        fixed = backbone.encode_source_text(_padded(tokens, CONTEXT, backbone.tokenizer.pad_id))
    torch.testing.assert_close(dynamic, fixed, rtol=1e-5, atol=1e-5)


def test_target_branch_gives_the_same_embedding_padded_to_context(tiny_retriever):
    branch = tiny_retriever.language_branch
    tokens = branch.tokenize(TARGETS)
    langs = ['de', 'zh', 'de']
    with torch.no_grad():
        dynamic = branch(tokens, langs)
        fixed = branch(_padded(tokens, CONTEXT, branch.tokenizer.pad_id), langs)
    torch.testing.assert_close(dynamic, fixed, rtol=1e-5, atol=1e-5)


def test_text_tower_takes_every_length_up_to_its_context(tiny_retriever):
    tower = tiny_retriever.backbone.text_tower
    for length in (1, 2, CONTEXT // 2, CONTEXT):
        ids = torch.randint(1, 1000, (2, length))
        tokens = TokenBatch(input_ids=ids, attention_mask=torch.ones(2, length, dtype=torch.bool),
                            eos_index=torch.full((2,), length - 1))
        with torch.no_grad():
            assert tower(tokens).shape == (2, tower.embed_dim)
    too_long = torch.ones(1, CONTEXT + 1, dtype=torch.long)
    with pytest.raises(ValueError, match=f'{CONTEXT + 1} tokens exceeds the text context length'):
        tower(TokenBatch(input_ids=too_long, attention_mask=too_long.bool(),
                         eos_index=torch.tensor([CONTEXT])))
