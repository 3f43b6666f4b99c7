"""InfoNCELoss: symmetric cross-entropy over cosine logits at a fixed or clamped scale."""
import math

import pytest
import torch
import torch.nn.functional as F

from xmr.models.losses import InfoNCELoss
from xmr.models.losses.contrastive import symmetric_cross_entropy


def symmetric_ce(a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    logits = scale * F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).t()
    labels = torch.arange(a.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


def test_the_loss_is_both_directions_cross_entropy_at_one_over_tau():
    torch.manual_seed(0)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    torch.testing.assert_close(InfoNCELoss(temperature=0.05)(a, b), symmetric_ce(a, b, 20.0))


def test_the_gradient_of_the_logits_is_both_softmaxes_less_the_labels_in_float64():
    """``∂L/∂S = (softmax_rows(S) − I + softmax_columns(S) − I) / 2B``, and ``gradcheck``
    through the normalisation of the embeddings."""
    torch.manual_seed(0)
    a, b = (torch.randn(5, 8, dtype=torch.float64, requires_grad=True) for _ in range(2))
    logits = (20.0 * F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).t()).detach()
    logits.requires_grad_()
    symmetric_cross_entropy(logits).backward()
    eye = torch.eye(5, dtype=torch.float64)
    expected = (logits.detach().softmax(1) - eye + logits.detach().softmax(0) - eye) / 10
    torch.testing.assert_close(logits.grad, expected)
    assert torch.autograd.gradcheck(InfoNCELoss(temperature=0.05), (a, b))


def test_a_learnable_scale_past_max_scale_is_clamped_and_trains_on_from_there():
    """Clamped in the graph, a scale a step took past the cap got no gradient again and stayed
    at 100 for the rest of the run, whatever the data asked for."""
    torch.manual_seed(0)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    loss_fn = InfoNCELoss(learnable=True)
    with torch.no_grad():
        loss_fn.log_scale.fill_(math.log(1000.0))  # an optimiser step took it past CLIP's cap
    loss = loss_fn(a, b)
    torch.testing.assert_close(loss, symmetric_ce(a, b, 100.0))
    assert loss_fn.log_scale.item() == pytest.approx(math.log(100.0))
    loss.backward()
    # d/ds of the loss at scale e^s = 100, by finite differences of the reference.
    step = 1e-3
    expected = (symmetric_ce(a, b, math.exp(math.log(100.0) + step))
                - symmetric_ce(a, b, math.exp(math.log(100.0) - step))) / (2 * step)
    assert loss_fn.log_scale.grad.item() == pytest.approx(expected.item(), rel=1e-3)
    assert expected.item() > 0  # random pairs ask for a lower scale, which a step now gives
    torch.optim.SGD([loss_fn.log_scale], lr=0.5).step()
    assert loss_fn.log_scale.item() < math.log(100.0)


def test_a_non_positive_temperature_is_refused():
    with pytest.raises(ValueError, match='temperature must be positive, got 0'):
        InfoNCELoss(temperature=0)


def test_masked_other_captions_of_a_medium_leave_each_softmax():
    """Each row's softmax, written as a loop, over its own pair and the pairs of other media
    only, in both directions."""
    torch.manual_seed(0)
    a, b = torch.randn(5, 8, requires_grad=True), torch.randn(5, 8, requires_grad=True)
    media = ['p', 'q', 'p', 'r', 'q']
    same_media = torch.tensor([[i == j for j in media] for i in media])
    loss = InfoNCELoss(temperature=0.1, mask_same_media=True)(a, b, same_media)
    scores = 10.0 * F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).t()
    terms = []
    for direction in (scores, scores.t()):
        for i in range(5):
            kept = [j for j in range(5) if j == i or media[j] != media[i]]
            terms.append(torch.logsumexp(direction[i, kept], 0) - direction[i, i])
    expected = torch.stack(terms).sum() / 10
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(torch.autograd.grad(loss, (a, b)),
                               torch.autograd.grad(expected, (a, b)))
    assert loss.item() < symmetric_ce(a, b, 10.0).item()  # fewer negatives, a lower loss


def test_a_temperature_whose_scale_max_scale_would_clamp_is_refused():
    # 1/τ = 200 would be clamped to CLIP's 100 without a word: the loss would run at τ = 0.01.
    with pytest.raises(ValueError, match=r'temperature 0.005 gives a logit scale of 200.*'
                                         r'max_scale=100.*max_scale=200'):
        InfoNCELoss(temperature=0.005)
    with pytest.raises(ValueError, match='temperature 0.005'):
        InfoNCELoss(temperature=0.005, learnable=True)
    torch.manual_seed(0)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    torch.testing.assert_close(InfoNCELoss(temperature=0.005, max_scale=200.0)(a, b),
                               symmetric_ce(a, b, 200.0))
    # DASD's τ = 0.01 is CLIP's clamp itself: scale 100, accepted.
    torch.testing.assert_close(InfoNCELoss(temperature=0.01)(a, b), symmetric_ce(a, b, 100.0))


def test_by_default_the_scale_is_dasds_fixed_one_hundred():
    """DASD's ``L_CM``: τ = 0.01, a logit scale of 100 that does not train."""
    torch.manual_seed(0)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    loss_fn = InfoNCELoss()
    torch.testing.assert_close(loss_fn(a, b), symmetric_ce(a, b, 100.0))
    assert not list(loss_fn.parameters())


def test_a_learnable_scale_starts_at_one_over_the_temperature_given():
    torch.manual_seed(0)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    loss_fn = InfoNCELoss(temperature=0.05, learnable=True)
    assert loss_fn.log_scale.item() == pytest.approx(math.log(20.0))
    torch.testing.assert_close(loss_fn(a, b), symmetric_ce(a, b, 20.0))


class _Backbone(torch.nn.Module):
    """A backbone that learnt the logit scale 25 (CCLM's ``1 / temp`` at temp 0.04)."""

    def pair_logits(self):
        return torch.tensor(25.0), None


def test_without_a_temperature_the_scale_is_the_backbones_own_learnt_one():
    torch.manual_seed(0)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    loss_fn = InfoNCELoss(temperature=None, backbone=_Backbone())
    torch.testing.assert_close(loss_fn(a, b), symmetric_ce(a, b, 25.0))
    assert not list(loss_fn.parameters()) and not list(loss_fn.buffers())


def test_a_temperature_given_wins_over_the_backbone():
    torch.manual_seed(0)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    loss_fn = InfoNCELoss(temperature=0.05, backbone=_Backbone())
    torch.testing.assert_close(loss_fn(a, b), symmetric_ce(a, b, 20.0))


def test_the_backbones_temperature_needs_a_backbone_and_cannot_be_learnt():
    with pytest.raises(ValueError, match="reads the backbone's temperature"):
        InfoNCELoss(temperature=None)
    with pytest.raises(ValueError, match=r'learnable=True\) starts from a temperature'):
        InfoNCELoss(temperature=None, learnable=True, backbone=_Backbone())


def test_the_backbones_scale_is_read_not_trained_through_the_loss():
    """The loss reads a backbone's learnt scale as a fixed number: no gradient reaches it."""

    class LearntScaleBackbone(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.logit_scale = torch.nn.Parameter(torch.tensor(25.0))

        def pair_logits(self):
            return self.logit_scale, None

    backbone = LearntScaleBackbone()
    torch.manual_seed(0)
    a, b = torch.randn(5, 8, requires_grad=True), torch.randn(5, 8)
    InfoNCELoss(temperature=None, backbone=backbone)(a, b).backward()
    assert a.grad is not None and backbone.logit_scale.grad is None
