"""Counts of iterations given in epochs: exact products, refused forms."""
from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from xmr.engine.epoch_counts import (
    batches_per_epoch,
    check_epochs,
    iterations_in,
    resolve_count,
    resolved_text,
)


@pytest.mark.parametrize('epochs, batches, iterations', [
    (1, 2265, 2265),       # CDDS Flickr30K: 145,000 captions at 64
    (0.25, 8855, 2213),    # a quarter epoch of MSCOCO's 566,747 captions at 64: 2213.75
    (0.25, 6470, 1617),    # of train2014's 414,113 at 64: 1617.5
    (0.29, 100, 29),       # in floats 0.29 x 100 = 28.999999999999996
    (2.5, 3, 7),
])
def test_epochs_resolve_to_the_whole_iterations_of_their_exact_product(epochs, batches,
                                                                       iterations):
    assert iterations_in('k', epochs, batches) == iterations
    assert resolve_count('k', dict(epochs=epochs), range(batches)) == iterations


def test_a_count_in_iterations_is_left_as_it_is():
    assert resolve_count('k', 300, None) == 300


def test_a_count_of_no_whole_iteration_is_refused_naming_its_key():
    with pytest.raises(ValueError, match=r'^train_cfg.val_interval: 0.1 epochs of 5 batches '
                                         r'make no whole iteration'):
        resolve_count('train_cfg.val_interval', dict(epochs=0.1), range(5))


@pytest.mark.parametrize('value', [dict(epoch=1), dict(epochs=0), dict(epochs=-1),
                                   dict(epochs=True), dict(epochs='1'),
                                   dict(epochs=float('inf')), dict(epochs=1, iters=2)])
def test_a_malformed_count_in_epochs_is_refused_naming_its_key(value):
    with pytest.raises(ValueError, match=r'^default_hooks.checkpoint.interval=\{.*\}: a count '
                                         r'in epochs is dict\(epochs=E\), E a positive number'):
        check_epochs('default_hooks.checkpoint.interval', value)


class _Stream(IterableDataset):
    def __iter__(self):
        yield torch.zeros(1)


def test_a_dataloader_without_a_length_has_no_epochs():
    with pytest.raises(ValueError, match=r'^train_cfg.val_interval: epochs need a dataloader '
                                         r'with a length, and that of _Stream has none; give '
                                         r'iterations instead'):
        batches_per_epoch(DataLoader(_Stream()), 'train_cfg.val_interval')


@pytest.mark.parametrize('epochs, iterations, batches, text', [
    (1, 2265, 2265, '1 epoch = 2265 iterations (2265 per epoch)'),
    (0.5, 1, 2, '0.5 epochs = 1 iteration (2 per epoch)'),
    (3, 6, 2, '3 epochs = 6 iterations (2 per epoch)')])
def test_the_log_says_how_a_count_in_epochs_resolved_in_words(epochs, iterations, batches, text):
    """It logged '1 epochs'."""
    assert resolved_text(epochs, iterations, batches) == text
