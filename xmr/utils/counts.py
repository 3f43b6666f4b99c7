"""What a count or a number a config gives must be."""
from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ['check_count', 'is_count', 'is_finite_number']


def is_count(value: Any, least: int = 1) -> bool:
    """Whether ``value`` is an integer ``>= least``: a frame count, a K, a fold, a search depth.

    A float (``24 / 2``) would name keys ``R@1.0`` or fail inside torch or faiss naming nothing;
    a bool is an int to Python but no count.
    """
    return (isinstance(value, numbers.Integral) and not isinstance(value, bool)
            and bool(value >= least))


def check_count(value: Any, name: str) -> None:
    """Refuse a ``value`` that is no positive integer (:func:`is_count`), naming it ``name``.

    Raises:
        ValueError: ``'{name} must be a positive integer, got {value!r}.'``
    """
    if not is_count(value):
        raise ValueError(f'{name} must be a positive integer, got {value!r}.')


def is_finite_number(value: Any) -> bool:
    """Whether ``value`` is a finite real number (a loss weight, a rate), not a bool."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value))
