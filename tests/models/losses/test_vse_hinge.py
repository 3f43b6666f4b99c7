"""VSE++'s hinge loss: worked by hand, against a loop over the triplets, and its schedule."""
from __future__ import annotations

import pytest
import torch

from xmr.models.losses import VSEHingeLoss

# Cosines s(image i, caption j): [[1, .8, 0], [0, .6, 1], [.6, .96, .8]].
IMAGES = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
CAPTIONS = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])
# Margin 0.2. Images against other captions: image 1 vs caption 2: .2 - .6 + 1 = .6; image 2
# vs caption 1: .2 - .8 + .96 = .36; the rest <= 0. Captions against other images: caption 1
# vs image 0: .2 - .6 + .8 = .4, vs image 2: .56; caption 2 vs image 1: .4.
SUMMED = 0.6 + 0.36 + 0.4 + 0.56 + 0.4
HARDEST = 0.6 + 0.36 + 0.56 + 0.4  # caption 1 keeps its larger violation alone


def triplet_loop(a: torch.Tensor, b: torch.Tensor, margin: float, hardest: bool) -> torch.Tensor:
    a, b = a / a.norm(dim=1, keepdim=True), b / b.norm(dim=1, keepdim=True)
    total = a.new_zeros(())
    for query in range(a.shape[0]):
        to_captions = [torch.relu(margin - a[query] @ b[query] + a[query] @ b[j])
                       for j in range(b.shape[0]) if j != query]
        to_images = [torch.relu(margin - a[query] @ b[query] + a[i] @ b[query])
                     for i in range(a.shape[0]) if i != query]
        for violations in (to_captions, to_images):
            total = total + (max(violations) if hardest else sum(violations))
    return total


def test_the_loss_worked_by_hand():
    assert VSEHingeLoss(hardest_after=None)(IMAGES, CAPTIONS).item() == pytest.approx(SUMMED)
    assert VSEHingeLoss()(IMAGES, CAPTIONS).item() == pytest.approx(HARDEST)


@pytest.mark.parametrize('hardest', [False, True])
def test_the_loss_and_its_gradients_equal_a_loop_over_the_triplets(hardest):
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(6, 8, generator=generator, requires_grad=True)
    b = torch.randn(6, 8, generator=generator, requires_grad=True)
    loss = VSEHingeLoss(margin=0.5, hardest_after=0 if hardest else None)(a, b)
    expected = triplet_loop(a, b, 0.5, hardest)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(torch.autograd.grad(loss, (a, b)),
                               torch.autograd.grad(expected, (a, b)))


def test_the_hardest_negatives_take_over_after_the_training_calls_given():
    """LAPS's schedule: the sum for its first epoch (here two calls), then the hardest; a
    validation's call counts for nothing, and the count resumes from a checkpoint."""
    loss = VSEHingeLoss(hardest_after=2)
    assert [loss(IMAGES, CAPTIONS).item() for _ in range(2)] == pytest.approx([SUMMED] * 2)
    assert loss.eval()(IMAGES, CAPTIONS).item() == pytest.approx(HARDEST)
    resumed = VSEHingeLoss(hardest_after=2)
    resumed.load_state_dict(loss.state_dict())
    assert resumed.calls.item() == 2
    assert resumed(IMAGES, CAPTIONS).item() == pytest.approx(HARDEST)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match='margin must be >= 0, got -0.1'):
        VSEHingeLoss(margin=-0.1)
    with pytest.raises(ValueError, match='hardest_after must be >= 0 .* got -1'):
        VSEHingeLoss(hardest_after=-1)
