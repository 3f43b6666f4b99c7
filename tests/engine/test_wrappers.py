"""unwrap_model: the module inside MMEngine's registered wrappers, a plain module as it is."""
from __future__ import annotations

from torch import nn

from xmr.engine.wrappers import unwrap_model


class _NotAWrapper(nn.Module):
    """Has a ``module`` attribute but is no registered wrapper: must not be unwrapped."""

    def __init__(self) -> None:
        super().__init__()
        self.module = nn.Linear(2, 2)


def test_a_wrapper_is_unwrapped_and_a_model_is_kept():
    inner = nn.Linear(2, 2)
    assert unwrap_model(nn.DataParallel(inner)) is inner
    assert unwrap_model(inner) is inner
    holder = _NotAWrapper()
    assert unwrap_model(holder) is holder
