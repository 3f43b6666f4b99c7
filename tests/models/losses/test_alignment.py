"""AlignmentLoss: DASD's L_CL and MLA's NLT stage, checked on numbers worked by hand."""
import pytest
import torch

from xmr.models.losses import AlignmentLoss

PREDICTION = torch.tensor([[1.0, 2.0], [0.0, -1.0]])
TARGET = torch.tensor([[3.0, 2.0], [0.0, 1.0]])


def test_mean_averages_every_element_and_sum_is_the_papers_squared_norm_per_pair():
    # Squared differences: [[4, 0], [0, 4]].
    assert AlignmentLoss('mse')(PREDICTION, TARGET).item() == pytest.approx(2.0)
    # ||r^S - r^T||² per pair: 4 and 4, averaged over the batch.
    assert AlignmentLoss('mse', reduction='sum')(PREDICTION, TARGET).item() == pytest.approx(4.0)
    # Absolute differences [[2, 0], [0, 2]]: mean 1, per-pair sum 2.
    assert AlignmentLoss('l1')(PREDICTION, TARGET).item() == pytest.approx(1.0)
    assert AlignmentLoss('l1', reduction='sum')(PREDICTION, TARGET).item() == pytest.approx(2.0)


def test_normalize_compares_unit_vectors_on_both_sides():
    # [2, 0] -> [1, 0] and [0, 3] -> [0, 1]: squared differences [1, 1], mean 1.
    loss = AlignmentLoss('mse', normalize=True)(torch.tensor([[2.0, 0.0]]),
                                                torch.tensor([[0.0, 3.0]]))
    assert loss.item() == pytest.approx(1.0)
    # Two rows: each row is scaled to unit length on its own (not each column).
    # [3, 4] -> [.6, .8] against [0, 1]: .36 + .04; [1, 0] against [0, 1]: 1 + 1; mean 0.6.
    loss = AlignmentLoss('mse', normalize=True)(torch.tensor([[3.0, 4.0], [1.0, 0.0]]),
                                                torch.tensor([[0.0, 2.0], [0.0, 5.0]]))
    assert loss.item() == pytest.approx(0.6)


def test_bad_options_name_the_value():
    with pytest.raises(ValueError, match="kind 'l2' is not one of"):
        AlignmentLoss('l2')
    with pytest.raises(ValueError, match="reduction 'none' is not 'mean' or 'sum'"):
        AlignmentLoss(reduction='none')
