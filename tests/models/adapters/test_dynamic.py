"""DynamicAdapter and the parameter generator against references written from their equations."""
from __future__ import annotations

import pytest
import torch

from xmr.models.adapters import (
    AdapterContext,
    AdapterPlacement,
    DynamicAdapter,
    StaticAdapter,
)
from xmr.models.disentanglers import ParameterGenerator
from xmr.registry import ADAPTERS

WIDTH, D_U, BATCH, LENGTH = 12, 4, 3, 5


def make_adapter(block_index: int = 2) -> DynamicAdapter:
    torch.manual_seed(0)
    return ADAPTERS.build(dict(type='DynamicAdapter', hidden=D_U),
                          default_args=dict(
                              placement=AdapterPlacement(WIDTH, block_index=block_index)))


def context(matrices: dict) -> AdapterContext:
    return AdapterContext(lang='de', block_index=2, condition=matrices)


def test_output_is_the_equation_with_one_matrix_per_sample():
    adapter = make_adapter()
    x = torch.randn(BATCH, LENGTH, WIDTH)
    w = torch.randn(BATCH, D_U, D_U)
    out = adapter(x, context({2: w}))
    assert out.shape == (BATCH, LENGTH, WIDTH)
    down = x @ adapter.down.weight.T + adapter.down.bias                     # W_down x
    expected = torch.stack([
        x[b] + torch.relu((w[b] @ down[b].T).T) @ adapter.up.weight.T + adapter.up.bias
        for b in range(BATCH)])                                               # x + W_up ReLU(W^z .)
    torch.testing.assert_close(out, expected)


def test_each_sample_reads_only_its_own_matrix():
    adapter = make_adapter()
    x = torch.randn(BATCH, LENGTH, WIDTH)
    w = torch.randn(BATCH, D_U, D_U)
    changed = w.clone()
    changed[1] = torch.randn(D_U, D_U)
    before, after = adapter(x, context({2: w})), adapter(x, context({2: changed}))
    torch.testing.assert_close(before[[0, 2]], after[[0, 2]])
    assert not torch.allclose(before[1], after[1])


def test_identity_matrix_gives_the_static_adapter_of_width_d_u():
    adapter = make_adapter()
    static = StaticAdapter(AdapterPlacement(WIDTH), hidden=D_U)
    static.load_state_dict(adapter.state_dict())
    x = torch.randn(BATCH, LENGTH, WIDTH)
    eye = torch.eye(D_U).expand(BATCH, D_U, D_U)
    torch.testing.assert_close(adapter(x, context({2: eye})), static(x, context({})))


def test_matrix_receives_gradients_and_so_does_the_adapter():
    adapter = make_adapter()
    w = torch.randn(BATCH, D_U, D_U, requires_grad=True)
    adapter(torch.randn(BATCH, LENGTH, WIDTH), context({2: w})).square().sum().backward()
    assert w.grad is not None and w.grad.abs().sum() > 0
    assert adapter.down.weight.grad.abs().sum() > 0 and adapter.up.weight.grad.abs().sum() > 0


def test_missing_or_misshapen_condition_fails_clearly():
    adapter = make_adapter()
    x = torch.randn(BATCH, LENGTH, WIDTH)
    with pytest.raises(ValueError, match='needs per-caption W\\^z.*SemanticsDisentangler'):
        adapter(x, context(None))
    with pytest.raises(KeyError, match=r'blocks \[0, 1\] only'):
        adapter(x, context({0: torch.eye(D_U), 1: torch.eye(D_U)}))
    with pytest.raises(ValueError, match=r'd_u=4.*\(3, 5, 5\)'):
        adapter(x, context({2: torch.randn(BATCH, 5, 5)}))


def test_the_block_and_mlp_outputs_are_served_after_the_block_by_default():
    assert DynamicAdapter(AdapterPlacement(WIDTH), hidden=D_U).site == 'block.output'
    assert DynamicAdapter(AdapterPlacement(WIDTH, 'mlp.output'), hidden=D_U).site == 'mlp.output'
    with pytest.raises(ValueError, match=r"serves \['block.output', 'mlp.output'\], not "
                       'attn.output'):
        DynamicAdapter(AdapterPlacement(WIDTH, 'attn.output'), hidden=D_U)


def test_generator_is_z_then_one_reshaped_head_per_block():
    torch.manual_seed(0)
    generator = ParameterGenerator(in_features=10, blocks=[3, 0], d_z=6, d_u=D_U)
    features = torch.randn(BATCH, 10)
    matrices = generator(features)
    assert sorted(matrices) == [0, 3]
    first = generator.to_z[0]
    z = torch.nn.functional.gelu(features @ first.weight.T + first.bias)
    for block in (0, 3):
        head = generator.heads[str(block)]
        expected = (z @ head.weight.T + head.bias).view(BATCH, D_U, D_U)
        torch.testing.assert_close(matrices[block], expected)
    # Row-major reshape: entry (i, j) of W^z is output i * d_u + j of the head.
    flat = generator.heads['0'](z)
    torch.testing.assert_close(matrices[0][1, 2, 3], flat[1, 2 * D_U + 3])
    # Each head's gradient comes from its own block's W^z alone.
    weights = torch.randn(2, BATCH, D_U, D_U)
    (weights[0] * matrices[0] + weights[1] * matrices[3]).sum().backward()
    for weight, block in zip(weights, (0, 3)):
        head = generator.heads[str(block)]
        torch.testing.assert_close(head.weight.grad, weight.reshape(BATCH, -1).T @ z.detach())
        torch.testing.assert_close(head.bias.grad, weight.reshape(BATCH, -1).sum(0))


def test_generator_refuses_bad_blocks():
    with pytest.raises(ValueError, match='at least one block'):
        ParameterGenerator(8, blocks=[])
    with pytest.raises(ValueError, match='distinct non-negative'):
        ParameterGenerator(8, blocks=[1, 1])
