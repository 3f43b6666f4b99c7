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


def triplet_loop(a: torch.Tensor, b: torch.Tensor, margin: float, hardest: bool,
                 media: list[str] | None = None) -> torch.Tensor:
    """The loss as a loop over triplets; with ``media`` (row i's medium), a query's triplets
    skip the rows of its own medium (LAPS's ``mask_repeat``)."""
    a, b = a / a.norm(dim=1, keepdim=True), b / b.norm(dim=1, keepdim=True)
    media = media or [str(row) for row in range(a.shape[0])]
    total = a.new_zeros(())
    for query in range(a.shape[0]):
        to_captions = [torch.relu(margin - a[query] @ b[query] + a[query] @ b[j])
                       for j in range(b.shape[0]) if media[j] != media[query]]
        to_images = [torch.relu(margin - a[query] @ b[query] + a[i] @ b[query])
                     for i in range(a.shape[0]) if media[i] != media[query]]
        for violations in (to_captions, to_images):
            total = total + (max(violations) if hardest else sum(violations))
    return total


def test_the_loss_worked_by_hand():
    assert VSEHingeLoss(hardest_after_pairs=None)(IMAGES, CAPTIONS).item() == pytest.approx(
        SUMMED)
    assert VSEHingeLoss()(IMAGES, CAPTIONS).item() == pytest.approx(HARDEST)


@pytest.mark.parametrize('hardest', [False, True])
def test_the_loss_and_its_gradients_equal_a_loop_over_the_triplets(hardest):
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(6, 8, generator=generator, requires_grad=True)
    b = torch.randn(6, 8, generator=generator, requires_grad=True)
    loss = VSEHingeLoss(margin=0.5, hardest_after_pairs=0 if hardest else None)(a, b)
    expected = triplet_loop(a, b, 0.5, hardest)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(torch.autograd.grad(loss, (a, b)),
                               torch.autograd.grad(expected, (a, b)))


@pytest.mark.parametrize('hardest', [False, True])
def test_other_captions_of_a_querys_image_are_no_negatives_when_masked(hardest):
    """Rows 0, 2 and 5 show one image, rows 1 and 4 another: masked, none of them is a
    negative of the others (LAPS); unmasked, they are (VSE++)."""
    generator = torch.Generator().manual_seed(1)
    a = torch.randn(6, 8, generator=generator, requires_grad=True)
    b = torch.randn(6, 8, generator=generator, requires_grad=True)
    media = ['x', 'y', 'x', 'z', 'y', 'x']
    same_media = torch.tensor([[i == j for j in media] for i in media])
    after = 0 if hardest else None
    masked = VSEHingeLoss(hardest_after_pairs=after, mask_same_media=True)(a, b, same_media)
    expected = triplet_loop(a, b, 0.2, hardest, media)
    torch.testing.assert_close(masked, expected)
    torch.testing.assert_close(torch.autograd.grad(masked, (a, b)),
                               torch.autograd.grad(expected, (a, b)))
    assert VSEHingeLoss(hardest_after_pairs=after)(a, b).item() != pytest.approx(expected.item())
    # The worked example with pairs 1 and 2 of one medium: the violations between rows 1
    # and 2 (.6, .36, .56, .4) drop out, caption 1 against image 0 (.4) stays.
    one = torch.tensor([[False, False, False], [False, False, True], [False, True, False]])
    assert VSEHingeLoss(hardest_after_pairs=None)(IMAGES, CAPTIONS, one).item() == \
        pytest.approx(0.4)


def test_the_hardest_negatives_take_over_after_the_training_pairs_given():
    """LAPS's schedule: the sum for its first epoch (here 6 pairs: two batches of 3), then the
    hardest; a validation's call counts for nothing, and the count resumes from a checkpoint."""
    loss = VSEHingeLoss(hardest_after_pairs=6)
    assert [loss(IMAGES, CAPTIONS).item() for _ in range(2)] == pytest.approx([SUMMED] * 2)
    assert loss.eval()(IMAGES, CAPTIONS).item() == pytest.approx(HARDEST)
    resumed = VSEHingeLoss(hardest_after_pairs=6)
    resumed.load_state_dict(loss.state_dict())
    assert resumed.pairs_seen.item() == 6
    assert resumed(IMAGES, CAPTIONS).item() == pytest.approx(HARDEST)


def test_the_schedule_counts_the_global_batchs_pairs_not_the_calls():
    """Under DDP the loss sees the gathered batch: two processes of 3 pairs make one call of 6
    on each rank, so an epoch of 6 pairs ends after one call, as one process of 6 would."""
    loss = VSEHingeLoss(hardest_after_pairs=6)
    six_images, six_captions = IMAGES.repeat(2, 1), CAPTIONS.repeat(2, 1)
    loss(six_images, six_captions)
    assert loss.pairs_seen.item() == 6
    assert loss(IMAGES, CAPTIONS).item() == pytest.approx(HARDEST)


#: Four pairs, the last a copy of the first: each query has more than one negative, so the sum
#: and the hardest differ.
FOUR = [0, 1, 2, 0]


@pytest.mark.parametrize('pairs, batch, summed_calls', [(7, 3, 2), (7, 4, 1), (9, 4, 2),
                                                          (6, 3, 2), (8, 4, 2), (2, 3, 0)])
def test_the_sum_covers_the_first_pass_at_any_batch_size(pairs: int, batch: int,
                                                          summed_calls: int):
    """A pass of ``pairs`` at ``batch`` is ``pairs // batch`` full batches (the last incomplete
    one dropped): the hardest negatives take the next call, whatever batch a config assumed."""
    loss = VSEHingeLoss(hardest_after_pairs=pairs)
    images, captions = IMAGES[FOUR[:batch]], CAPTIONS[FOUR[:batch]]
    summed = VSEHingeLoss(hardest_after_pairs=None)(images, captions).item()
    hardest = VSEHingeLoss(hardest_after_pairs=0)(images, captions).item()
    assert summed != pytest.approx(hardest)
    assert [loss(images, captions).item() for _ in range(summed_calls + 2)] == pytest.approx(
        [summed] * summed_calls + [hardest] * 2)


def test_an_incomplete_last_batch_kept_still_sums():
    """Without drop_last a pass of 7 pairs at 4 is 4 then 3: both sum, the next pass's first
    batch takes the hardest."""
    loss = VSEHingeLoss(hardest_after_pairs=7)
    loss(IMAGES[FOUR], CAPTIONS[FOUR])
    assert loss(IMAGES, CAPTIONS).item() == pytest.approx(SUMMED)
    assert loss(IMAGES, CAPTIONS).item() == pytest.approx(HARDEST)
