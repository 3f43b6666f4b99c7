import math

import pytest
import torch

from tests.models.adapters.peft_helpers import build_clip_branch
from xmr.models.adapters import (
    AdapterContext,
    AdapterPlacement,
    AdapterSite,
    CompacterAdapter,
    PHMLinear,
    PHMRule,
)


def test_phm_weight_is_the_sum_of_kronecker_products():
    torch.manual_seed(0)
    rule = PHMRule(4)
    layer = PHMLinear(12, 8, rank=1, rule=rule)
    expected = sum(torch.kron(rule.rule[i], layer.left[i] @ layer.right[i]) for i in range(4))
    torch.testing.assert_close(layer.weight(), expected)
    x = torch.randn(5, 12)
    torch.testing.assert_close(layer(x), x @ expected + layer.bias)


def test_a_nonzero_bias_is_added_to_the_kronecker_product():
    """``y = x W + b``: the bias starts at zero, so only a set one shows it is added at all."""
    torch.manual_seed(0)
    layer = PHMLinear(8, 12, phm_dim=2, rank=2)
    with torch.no_grad():
        layer.bias.copy_(torch.linspace(-1.0, 1.0, 12))
    weight = sum(torch.kron(layer.rule.rule[i], layer.left[i] @ layer.right[i])
                 for i in range(2))
    x = torch.randn(3, 8)
    torch.testing.assert_close(layer(x), x @ weight + torch.linspace(-1.0, 1.0, 12))


def test_each_b_i_has_rank_one():
    layer = PHMLinear(16, 8, rank=1)
    blocks = layer.left @ layer.right
    assert [torch.linalg.matrix_rank(b).item() for b in blocks] == [1, 1, 1, 1]


def test_by_default_every_phm_layer_has_its_own_rule_as_in_opendelta():
    """OpenDelta's CompacterModel (PECTVLM's) refuses shared_phm_rule: a rule per PHM layer."""
    _, branch = build_clip_branch(dict(type='CompacterAdapter', reduction_factor=4))
    german = branch.adapters.sets['de']
    layers = [m for m in german.modules() if isinstance(m, PHMLinear)]
    assert len({id(layer.rule) for layer in layers}) == len(layers) == 12  # 3 blocks x 2 sites
    assert not any(key.startswith('shared_') for key in german)
    assert sum(n.endswith('.rule.rule') for n in branch.state_dict()) == 2 * 12


def test_factors_start_as_opendeltas_glorot_uniform_and_the_rules_as_its_normal():
    torch.manual_seed(0)
    layer = PHMLinear(1024, 64, phm_dim=4, rank=1)
    # xavier_uniform_(gain=√2) on each [256, 1] slice: U(±√2·√(6 / (256 + 1))).
    bound = math.sqrt(2) * math.sqrt(6 / (256 + 1))
    assert layer.left.abs().max() <= bound
    assert layer.left.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.1)
    bound_right = math.sqrt(2) * math.sqrt(6 / (1 + 16))  # the [1, 16] slices
    assert layer.right.abs().max() <= bound_right
    assert layer.right.std().item() == pytest.approx(bound_right / math.sqrt(3), rel=0.15)
    assert layer.rule.rule.std().item() == pytest.approx(0.01, rel=0.3)
    assert torch.count_nonzero(layer.bias) == 0
    normal = PHMLinear(1024, 64, factor_init='normal', init_std=1e-4)
    assert normal.left.std().item() == pytest.approx(1e-4, rel=0.1)
    with pytest.raises(ValueError, match="factor_init 'xavier' is none of"):
        PHMLinear(8, 8, factor_init='xavier')


def test_with_share_rule_one_rule_serves_every_layer_of_a_language_registered_once():
    _, branch = build_clip_branch(dict(type='CompacterAdapter', reduction_factor=4,
                                       share_rule=True))
    german, chinese = branch.adapters.sets['de'], branch.adapters.sets['zh']
    rules = {id(m.rule) for m in german.modules() if isinstance(m, PHMLinear)}
    assert rules == {id(german['shared_0'])}
    assert german['shared_0'] is not chinese['shared_0']
    names = [n for n in branch.state_dict() if n.endswith('.rule')]
    assert names == ['adapters.sets.de.shared_0.rule', 'adapters.sets.zh.shared_0.rule']


def test_the_shared_rule_receives_gradient_from_every_layer():
    _, branch = build_clip_branch(dict(type='CompacterAdapter', reduction_factor=4,
                                       share_rule=True), languages=['de'])
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
    # Two sites x 3 blocks; a rule 4x4x4 per PHM layer, or once when shared.
    def count(**options):
        _, branch = build_clip_branch(dict(type='CompacterAdapter', reduction_factor=4,
                                           **options), languages=['de'])
        return sum(p.numel() for p in branch.adapters.parameters())

    assert count() == 6 * (48 + 64 + 72 + 64)
    assert count(share_rule=True) == 6 * (48 + 72) + 64


def test_standalone_instance_owns_its_rules():
    own = CompacterAdapter(AdapterPlacement(16, 'mlp.output'), reduction_factor=2)
    shared = CompacterAdapter(AdapterPlacement(16, 'mlp.output'), reduction_factor=2,
                              share_rule=True)
    assert isinstance(shared.own_rule, PHMRule) and shared.down.rule is shared.up.rule
    assert own.down.rule is not own.up.rule
    factors = (4 * 4 + 4 * 2 + 8) + (4 * 2 + 4 * 4 + 16)
    assert sum(p.numel() for p in own.parameters()) == factors + 2 * 64
    assert sum(p.numel() for p in shared.parameters()) == factors + 64


def test_pectvlms_reduction_is_the_default_and_zero_init_is_an_exact_identity():
    """zero_init zeroes the up projection alone: the adapter starts as the identity and the up
    layer's factors still receive gradient through the down layer's nonzero bottleneck."""
    placement = AdapterPlacement(64, 'mlp.output')
    assert CompacterAdapter(placement).down.out_features == 64 // 16
    adapter = CompacterAdapter(placement, reduction_factor=4, zero_init=True)
    assert torch.count_nonzero(adapter.up.right) == 0
    assert torch.count_nonzero(adapter.down.weight()) > 0
    x = torch.randn(2, 3, 64)
    out = adapter(x, AdapterContext(lang='de'))
    assert torch.equal(out, x)
    # The up layer learns from the first step: it sees the down layer's nonzero bottleneck.
    out.square().sum().backward()
    assert torch.count_nonzero(adapter.up.right.grad) > 0
    assert not torch.equal(CompacterAdapter(placement, reduction_factor=4)(
        x, AdapterContext(lang='de')), x)  # OpenDelta's start is near, not at, the identity


def test_under_autocast_the_adapter_returns_the_dtype_it_receives():
    """A bf16 hidden state comes back bf16, as from the adapters built on ``nn.Linear``: the
    PHM layers' fp32 biases must not promote the tower's activations to fp32."""
    adapter = CompacterAdapter(AdapterPlacement(64, 'mlp.output'), reduction_factor=4)
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert adapter(x, AdapterContext(lang='de')).dtype == torch.bfloat16


def test_bad_sizes_name_the_numbers():
    with pytest.raises(ValueError, match='reduction_factor 5 must divide the tower width 32'):
        CompacterAdapter(AdapterPlacement(32, 'mlp.output'), reduction_factor=5)
    with pytest.raises(ValueError, match='in_features=6 is not divisible by phm_dim=4'):
        PHMLinear(6, 8)


def test_the_adapter_is_x_plus_up_of_the_tanh_gelu_of_down_and_records_its_activation():
    """OpenDelta's default ``gelu_new`` is GELU's tanh approximation, written out here."""
    torch.manual_seed(0)
    adapter = CompacterAdapter(AdapterPlacement(16, 'mlp.output'), reduction_factor=2)
    with torch.no_grad():
        adapter.down.bias.fill_(-0.5)  # negative inputs, where the two GELUs differ most
    x = torch.randn(2, 3, 16)
    h = x @ adapter.down.weight() + adapter.down.bias
    gelu_tanh = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    expected = x + gelu_tanh @ adapter.up.weight() + adapter.up.bias
    torch.testing.assert_close(adapter(x, AdapterContext(lang='de')), expected)
    assert adapter.settings() == dict(activation='gelu_new')
    relu = CompacterAdapter(AdapterPlacement(16, 'mlp.output'), reduction_factor=2,
                            activation='relu')
    relu.load_state_dict(adapter.state_dict())
    assert relu.settings() == dict(activation='relu')
    torch.testing.assert_close(relu(x, AdapterContext(lang='de')),
                               x + h.relu() @ adapter.up.weight() + adapter.up.bias)


def test_every_weight_of_the_adapter_learns_biases_included():
    adapter = CompacterAdapter(AdapterPlacement(16, 'mlp.output'), reduction_factor=2)
    adapter(torch.randn(2, 3, 16), AdapterContext(lang='de')).square().sum().backward()
    assert {name for name, p in adapter.named_parameters()
            if p.grad is None or not p.grad.any()} == set()
    assert len(list(adapter.parameters())) == 8  # a rule, two factors and a bias per layer


def test_the_initialisation_options_reach_every_factor_and_rule():
    """``factor_init``/``init_std`` set both factors of both layers, ``rule_init_std`` every
    rule: a layer's own, an instance's shared one and the adapter set's shared one."""
    torch.manual_seed(0)
    normal = CompacterAdapter(AdapterPlacement(512, 'mlp.output'), reduction_factor=2,
                              factor_init='normal', init_std=0.05, rule_init_std=0.5)
    for layer in (normal.down, normal.up):
        for factor in (layer.left, layer.right):
            assert factor.std().item() == pytest.approx(0.05, rel=0.2)
        assert layer.rule.rule.std().item() == pytest.approx(0.5, rel=0.3)
    shared = CompacterAdapter(AdapterPlacement(16, 'mlp.output'), reduction_factor=2,
                              share_rule=True, rule_init_std=0.5)
    assert shared.own_rule.rule.std().item() == pytest.approx(0.5, rel=0.3)
    built = CompacterAdapter.build_shared(16, share_rule=True, rule_init_std=0.5)
    assert built.rule.std().item() == pytest.approx(0.5, rel=0.3)
    assert CompacterAdapter.build_shared(16) is None
    assert PHMRule(4, init_std=0.5).rule.std().item() == pytest.approx(0.5, rel=0.3)


def test_a_shared_rule_of_another_n_and_an_output_n_does_not_divide_are_refused():
    with pytest.raises(ValueError, match='shared PHM rule has n=2, the layer n=4'):
        PHMLinear(8, 8, phm_dim=4, rule=PHMRule(2))
    with pytest.raises(ValueError, match='out_features=6 is not divisible by phm_dim=4'):
        PHMLinear(8, 6)


def test_a_bottleneck_phm_dim_does_not_divide_names_the_options_it_comes_from():
    """On a tower 32 wide the defaults (reduction 16, n = 4) make a bottleneck of 2, which the
    PHM layer refused as 'out_features=2 is not divisible by phm_dim=4', naming neither."""
    with pytest.raises(ValueError, match=(
            r'^Compacter phm_dim 4 must divide the tower width 32 and the bottleneck '
            r'width // reduction_factor = 2: .*choose a smaller phm_dim or reduction_factor$')):
        CompacterAdapter(AdapterPlacement(32, AdapterSite.ATTN_OUTPUT, 0))
    CompacterAdapter(AdapterPlacement(32, AdapterSite.ATTN_OUTPUT, 0), reduction_factor=8)
