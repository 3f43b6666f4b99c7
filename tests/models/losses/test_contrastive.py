"""InfoNCELoss: symmetric cross-entropy over cosine logits at a fixed or clamped scale."""
import math

import pytest
import torch
import torch.nn.functional as F

from xmr.models.losses import InfoNCELoss


def symmetric_ce(a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    logits = scale * F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).t()
    labels = torch.arange(a.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


def test_the_loss_is_both_directions_cross_entropy_at_one_over_tau():
    torch.manual_seed(0)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    torch.testing.assert_close(InfoNCELoss(temperature=0.05)(a, b), symmetric_ce(a, b, 20.0))


def test_a_learnable_scale_is_clamped_at_max_scale_and_gets_no_gradient_there():
    torch.manual_seed(0)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    loss_fn = InfoNCELoss(learnable=True)
    with torch.no_grad():
        loss_fn.log_scale.fill_(math.log(1000.0))  # trained past CLIP's clamp
    loss = loss_fn(a, b)
    torch.testing.assert_close(loss, symmetric_ce(a, b, 100.0))
    loss.backward()
    assert loss_fn.log_scale.grad.item() == 0.0
    with torch.no_grad():
        loss_fn.log_scale.fill_(math.log(50.0))  # below the clamp it trains
    loss_fn.log_scale.grad = None
    loss_fn(a, b).backward()
    assert loss_fn.log_scale.grad.item() != 0.0


def test_a_non_positive_temperature_is_refused():
    with pytest.raises(ValueError, match='temperature must be positive, got 0'):
        InfoNCELoss(temperature=0)
