import math

import pytest
import torch

from xmr.models.losses import TranslationAlignmentLoss


def test_mse_is_the_mean_squared_difference_of_raw_embeddings():
    query = torch.tensor([[1.0, 2.0], [0.0, -1.0]])
    translation = torch.tensor([[3.0, 2.0], [0.0, 1.0]])
    # (4 + 0 + 0 + 4) / 4 elements
    assert TranslationAlignmentLoss('mse')(query, translation).item() == pytest.approx(2.0)


def test_contrastive_is_symmetric_infonce_at_scale_100():
    query = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    translation = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    # Cosines: row 0 [1, 1/√2], row 1 [0, 1/√2]; logits = 100 × cosines.
    c = 1 / math.sqrt(2)
    logits = 100 * torch.tensor([[1.0, c], [0.0, c]])
    row = -(torch.log_softmax(logits, 1)[0, 0] + torch.log_softmax(logits, 1)[1, 1]) / 2
    col = -(torch.log_softmax(logits.t(), 1)[0, 0] + torch.log_softmax(logits.t(), 1)[1, 1]) / 2
    loss = TranslationAlignmentLoss('contrastive', temperature=0.01)(query, translation)
    assert loss.item() == pytest.approx(((row + col) / 2).item(), rel=1e-5)


def test_bad_kind_and_unpaired_batches_are_refused():
    with pytest.raises(ValueError, match="kind 'cosine' is not one of"):
        TranslationAlignmentLoss('cosine')
    with pytest.raises(ValueError, match=r'paired batches, got \(2, 4\) and \(3, 4\)'):
        TranslationAlignmentLoss()(torch.zeros(2, 4), torch.zeros(3, 4))


def test_contrastive_runs_at_the_temperature_it_is_given():
    """τ = 0.5, not PECTVLM's 0.01: logits 2 × cosines [[1, c], [0, c]], c = 1/√2."""
    query = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    translation = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    c = 1 / math.sqrt(2)
    rows = -math.log(math.exp(2) / (math.exp(2) + math.exp(2 * c))) \
        - math.log(math.exp(2 * c) / (1 + math.exp(2 * c)))
    columns = -math.log(math.exp(2) / (math.exp(2) + 1)) + math.log(2)  # column 1: [2c, 2c]
    loss = TranslationAlignmentLoss('contrastive', temperature=0.5)(query, translation)
    assert loss.item() == pytest.approx((rows + columns) / 4, rel=1e-6)


def test_only_the_contrastive_kind_reads_the_other_pairs_of_the_batch():
    """The retrievers gather a batch-contrastive loss's inputs over DDP ranks; the mean squared
    difference compares each pair alone, so it runs on this rank's rows."""
    assert TranslationAlignmentLoss('contrastive').batch_contrastive
    assert not TranslationAlignmentLoss('mse').batch_contrastive


def test_contrastive_runs_at_a_scale_above_100_it_is_given():
    """τ = 0.005 (scale 200): a fixed scale is τ's alone; it was refused with advice to raise a
    max_scale this loss does not take."""
    query = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    translation = torch.tensor([[1.0, 1.0], [1.0, 1.02]])
    norm = math.hypot(1.0, 1.02)
    cos = [[1 / math.sqrt(2), 1 / norm], [1 / math.sqrt(2), 1.02 / norm]]
    logits = [[200 * value for value in row] for row in cos]

    def nll(row, i):
        return -(row[i] - math.log(sum(math.exp(value) for value in row)))

    rows = nll(logits[0], 0) + nll(logits[1], 1)
    columns = nll([logits[0][0], logits[1][0]], 0) + nll([logits[0][1], logits[1][1]], 1)
    loss = TranslationAlignmentLoss('contrastive', temperature=0.005)(query, translation)
    assert loss.item() == pytest.approx((rows + columns) / 4, rel=1e-5)
    with pytest.raises(ValueError, match='temperature must be positive, got 0'):
        TranslationAlignmentLoss('contrastive', temperature=0)
