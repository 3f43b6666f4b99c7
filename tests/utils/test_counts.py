"""xmr.utils.counts: what a configured count must be."""
from __future__ import annotations

import numpy as np
import pytest

from xmr.utils.counts import check_count, is_count


@pytest.mark.parametrize('value, least, expected', [
    (1, 1, True), (np.int64(5), 1, True), (0, 0, True),
    (0, 1, False), (-1, 0, False), (1.0, 1, False), ('2', 1, False), (True, 1, False),
    (None, 0, False),
])
def test_a_count_is_an_integer_no_bool_at_least_the_floor(value, least, expected):
    assert is_count(value, least) is expected


def test_check_count_names_the_option_and_the_value_it_refuses():
    check_count(np.int64(3), 'num_folds')
    with pytest.raises(ValueError) as error:
        check_count(2.0, 'num_folds')
    assert str(error.value) == 'num_folds must be a positive integer, got 2.0.'
