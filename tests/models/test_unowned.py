"""A held module stays its owner's: not in the holder's state, parameters, children or .to()."""
import torch
from torch import nn

from xmr.models.unowned import hold_unowned


def test_a_held_module_is_used_but_not_owned():
    owner, holder = nn.Linear(2, 2), nn.Module()
    holder.scale = nn.Parameter(torch.ones(1))
    hold_unowned(holder, 'tower', owner)
    assert holder.tower is owner
    assert list(holder.state_dict()) == ['scale']
    assert [p.shape for p in holder.parameters()] == [torch.Size([1])]
    assert list(holder.children()) == []
    holder.to(torch.float64)
    assert holder.scale.dtype == torch.float64 and owner.weight.dtype == torch.float32
