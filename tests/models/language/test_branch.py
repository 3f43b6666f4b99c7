import pytest
import torch

from tests.conftest import tiny_backbone_cfg, tiny_branch_cfg
from xmr.registry import MODELS


@pytest.fixture
def parts():
    torch.manual_seed(0)
    backbone = MODELS.build(tiny_backbone_cfg())
    branch = MODELS.build(tiny_branch_cfg(), default_args=dict(tower=backbone.text_tower))
    return backbone, branch


TEXTS = ['ein roter Kreis', '一个红色的圆', 'zwei blaue Quadrate links']
LANGS = ['de', 'zh', 'de']


def test_adapters_change_the_output(parts):
    backbone, branch = parts
    tokens = branch.tokenize(TEXTS)
    with_adapters = branch(tokens, LANGS)
    bare = MODELS.build(tiny_branch_cfg(adapters=[]), default_args=dict(tower=backbone.text_tower))
    bare.embedding.load_state_dict(branch.embedding.state_dict())
    assert not torch.allclose(with_adapters, bare(tokens, LANGS))


def test_branch_equals_frozen_tower_plus_adapters_by_hand(parts):
    backbone, branch = parts
    tokens = branch.tokenize(TEXTS[:1])
    tower = backbone.text_tower
    x = tower.add_positions(branch.embedding(tokens['input_ids']))
    mask = tower.build_mask(tokens['attention_mask'])
    for i in range(tower.num_blocks):
        x = tower.run_block(i, x, mask)
        adapter = branch.adapters.sets['de'][f'{i}:block_output']
        x = x + adapter.up(torch.relu(adapter.down(x)))
    expected = tower.head(x[0, tokens['eos_index'][0]])
    torch.testing.assert_close(branch(tokens, ['de'])[0], expected)


def test_mixed_language_batch_equals_per_language_batches(parts):
    _, branch = parts
    mixed = branch(branch.tokenize(TEXTS), LANGS)
    german = branch(branch.tokenize([TEXTS[0], TEXTS[2]]), ['de', 'de'])
    chinese = branch(branch.tokenize([TEXTS[1]]), ['zh'])
    torch.testing.assert_close(mixed[[0, 2]], german, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mixed[[1]], chinese, atol=1e-5, rtol=1e-4)


def test_languages_have_their_own_adapters(parts):
    _, branch = parts
    tokens = branch.tokenize(TEXTS[:1])
    assert not torch.allclose(branch(tokens, ['de']), branch(tokens, ['zh']))


def test_only_embedding_and_adapters_receive_gradients(parts):
    backbone, branch = parts
    branch(branch.tokenize(TEXTS), LANGS).sum().backward()
    assert all(p.grad is None for p in backbone.parameters())
    grads = {n for n, p in branch.named_parameters() if p.grad is not None}
    assert grads == {n for n, _ in branch.named_parameters()}
    assert any(n.startswith('adapters.sets.de.') for n in grads)
    assert 'embedding.table.weight' in grads


def test_unknown_language_names_the_configured_ones(parts):
    _, branch = parts
    with pytest.raises(KeyError, match=r"no adapters for language 'fr'.*\['de', 'zh'\]"):
        branch(branch.tokenize(TEXTS[:1]), ['fr'])


def test_width_mismatches_fail_at_build_naming_both_numbers(parts):
    backbone, _ = parts
    with pytest.raises(ValueError, match='width 768 but the text tower width is 32'):
        MODELS.build(tiny_branch_cfg(adapters=dict(type='StaticAdapter', width=768)),
                     default_args=dict(tower=backbone.text_tower))
    bad_embedding = tiny_branch_cfg()
    bad_embedding['embedding'] = dict(type='TargetEmbedding', width=512)
    with pytest.raises(ValueError, match='width 512 does not match the text tower width 32'):
        MODELS.build(bad_embedding, default_args=dict(tower=backbone.text_tower))
    long_tokens = tiny_branch_cfg()
    long_tokens['tokenizer']['max_length'] = 77
    with pytest.raises(ValueError, match='max_length 77 exceeds the text tower context length 32'):
        MODELS.build(long_tokens, default_args=dict(tower=backbone.text_tower))


def test_num_blocks_limits_the_branch(parts):
    backbone, _ = parts
    short = MODELS.build(tiny_branch_cfg(num_blocks=1), default_args=dict(
        tower=backbone.text_tower))
    assert {k.split(':')[0] for k in short.adapters.sets['de']} == {'0'}
    with pytest.raises(ValueError, match='num_blocks=9 but the text tower has 3 blocks'):
        MODELS.build(tiny_branch_cfg(num_blocks=9), default_args=dict(tower=backbone.text_tower))
