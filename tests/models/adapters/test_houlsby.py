import pytest
import torch
import torch.nn.functional as F

from tests.models.adapters.peft_helpers import build_clip_branch
from xmr.models.adapters import AdapterContext, AdapterPlacement, HoulsbyAdapter


def test_forward_is_x_plus_up_gelu_down_x():
    """OpenDelta's (PECTVLM's) default GELU is ``gelu_new``, the tanh approximation; weights
    of unit scale make it differ from the exact GELU beyond the comparison's tolerance."""
    adapter = HoulsbyAdapter(AdapterPlacement(16, 'attn.output'), hidden=4)
    torch.nn.init.normal_(adapter.down.weight, std=1.0)
    torch.nn.init.normal_(adapter.up.weight, std=1.0)
    x = torch.randn(2, 3, 16)
    down, up = adapter.down, adapter.up
    hidden = x @ down.weight.t() + down.bias
    expected = x + F.gelu(hidden, approximate='tanh') @ up.weight.t() + up.bias
    torch.testing.assert_close(adapter(x, AdapterContext(lang='de')), expected)


def test_default_placement_is_after_attention_and_after_the_ffn():
    _, branch = build_clip_branch(dict(type='HoulsbyAdapter', hidden=24), languages=['de'])
    assert sorted(branch.adapters.sets['de']) == [
        f'{b}:{s}' for b in range(3) for s in ('attn_output', 'mlp_output')]


def test_parameter_count_matches_a_hand_count():
    # Tiny CLIP width 32, 3 blocks, two sites each: down 32x8 + 8, up 8x32 + 32.
    _, branch = build_clip_branch(dict(type='HoulsbyAdapter', hidden=8), languages=['de'])
    assert sum(p.numel() for p in branch.adapters.parameters()) == 6 * (32 * 8 + 8 + 8 * 32 + 32)


def test_initialisation_is_small_normal_with_zero_biases():
    torch.manual_seed(0)
    adapter = HoulsbyAdapter(AdapterPlacement(256, 'mlp.output'), hidden=64, init_std=0.01)
    assert adapter.up.weight.std().item() == pytest.approx(0.01, rel=0.1)
    assert torch.count_nonzero(adapter.down.bias) == 0
    zero = HoulsbyAdapter(AdapterPlacement(8, 'mlp.output'), zero_init=True)
    assert torch.count_nonzero(zero.up.weight) == 0


def test_unknown_activation_is_refused():
    with pytest.raises(ValueError, match="unknown activation 'tanh'"):
        HoulsbyAdapter(AdapterPlacement(8, 'mlp.output'), activation='tanh')
