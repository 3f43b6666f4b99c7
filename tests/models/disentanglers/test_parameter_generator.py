"""ParameterGenerator: ``z = act(W x + b)``, ``W_i^z = reshape(W_i^down z + b_i)``, written out
from its weights, with the paper's GELU by default and the authors' QuickGELU on request."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from xmr.models.disentanglers.parameter_generator import ParameterGenerator


def written_out(generator: ParameterGenerator, features: torch.Tensor, activation) -> dict:
    linear = generator.to_z[0]
    z = activation(features @ linear.weight.T + linear.bias)
    return {block: (z @ generator.heads[str(block)].weight.T
                    + generator.heads[str(block)].bias).view(-1, 2, 2)
            for block in (0, 2)}


@pytest.mark.parametrize('activation,reference', [
    (None, F.gelu),  # the paper's GELU is the default
    ('quick_gelu', lambda x: x * torch.sigmoid(1.702 * x))])
def test_each_blocks_matrix_is_its_head_of_the_shared_z(activation, reference):
    torch.manual_seed(0)
    options = {} if activation is None else dict(activation=activation)
    generator = ParameterGenerator(6, blocks=[2, 0], d_z=5, d_u=2, **options)
    features = torch.randn(3, 6)
    condition = generator(features)
    assert list(condition) == [0, 2]
    expected = written_out(generator, features, reference)
    for block in (0, 2):
        torch.testing.assert_close(condition[block], expected[block])


def test_quick_gelu_by_hand():
    generator = ParameterGenerator(1, blocks=[0], activation='quick_gelu')
    quick_gelu = generator.to_z[1]
    # 1 · σ(1.702) and −1 · σ(−1.702).
    assert quick_gelu(torch.tensor([1.0, -1.0])).tolist() == pytest.approx(
        [1 / (1 + math.exp(-1.702)), -1 / (1 + math.exp(1.702))])


def test_by_default_z_has_the_papers_512_and_each_w_z_is_32_by_32():
    generator = ParameterGenerator(6, blocks=[0, 1])
    assert generator.to_z[0].out_features == 512
    condition = generator(torch.randn(3, 6))
    assert [tuple(matrix.shape) for matrix in condition.values()] == [(3, 32, 32)] * 2
