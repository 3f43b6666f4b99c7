import pytest
import torch

from tests.models.adapters.peft_helpers import build_clip_branch
from xmr.models.adapters import (
    AdapterContext,
    AdapterPlacement,
    CompacterAdapter,
    PHMLinear,
    PHMRule,
)


def test_phm_weight_is_the_sum_of_kronecker_products():
    torch.manual_seed(0)
    rule = PHMRule(4)
    layer = PHMLinear(12, 8, rule, rank=1, init_std=1.0)
    expected = sum(torch.kron(rule.rule[i], layer.left[i] @ layer.right[i]) for i in range(4))
    torch.testing.assert_close(layer.weight(), expected)
    x = torch.randn(5, 12)
    torch.testing.assert_close(layer(x), x @ expected + layer.bias)


def test_each_b_i_has_rank_one():
    layer = PHMLinear(16, 8, PHMRule(4), rank=1, init_std=1.0)
    blocks = layer.left @ layer.right
    assert [torch.linalg.matrix_rank(b).item() for b in blocks] == [1, 1, 1, 1]


def test_the_rule_is_shared_by_every_layer_of_a_language_and_registered_once():
    _, branch = build_clip_branch(dict(type='CompacterAdapter', reduction_factor=4))
    german, chinese = branch.adapters.sets['de'], branch.adapters.sets['zh']
    rules = {id(m.rule) for m in german.modules() if isinstance(m, PHMLinear)}
    assert rules == {id(german['shared_0'])}
    assert german['shared_0'] is not chinese['shared_0']
    names = [n for n in branch.state_dict() if n.endswith('.rule')]
    assert names == ['adapters.sets.de.shared_0.rule', 'adapters.sets.zh.shared_0.rule']


def test_the_shared_rule_receives_gradient_from_every_layer():
    _, branch = build_clip_branch(dict(type='CompacterAdapter', reduction_factor=4,
                                       init_std=0.5), languages=['de'])
    placed = branch.adapters.sets['de']
    rule = placed['shared_0'].rule
    x = torch.randn(2, 4, 32)
    for key, adapter in placed.items():
        if key == 'shared_0':
            continue
        rule.grad = None
        adapter(x, AdapterContext(lang='de')).square().sum().backward()
        assert rule.grad is not None and rule.grad.abs().sum() > 0, key


def test_parameter_count_matches_a_hand_count():
    # Width 32, reduction 4 -> hidden 8, n = 4, rank 1.
    # down: s 4x(32/4) + t 4x(8/4) + bias 8 = 48; up: s 4x(8/4) + t 4x(32/4) + bias 32 = 72.
    # Two sites x 3 blocks, plus the shared rule 4x4x4 once.
    _, branch = build_clip_branch(dict(type='CompacterAdapter', reduction_factor=4),
                                  languages=['de'])
    assert sum(p.numel() for p in branch.adapters.parameters()) == 6 * (48 + 72) + 64


def test_standalone_instance_owns_its_rule():
    adapter = CompacterAdapter(AdapterPlacement(16, 'mlp.output'), reduction_factor=2)
    assert isinstance(adapter.own_rule, PHMRule)
    assert sum(p.numel() for p in adapter.parameters()) == (
        4 * 4 + 4 * 2 + 8) + (4 * 2 + 4 * 4 + 16) + 64


def test_bad_sizes_name_the_numbers():
    with pytest.raises(ValueError, match='reduction_factor 5 must divide the tower width 32'):
        CompacterAdapter(AdapterPlacement(32, 'mlp.output'), reduction_factor=5)
    with pytest.raises(ValueError, match='in_features=6 is not divisible by phm_dim=4'):
        PHMLinear(6, 8, PHMRule(4))
