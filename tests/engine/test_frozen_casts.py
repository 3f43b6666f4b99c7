"""Frozen weights cast once under autocast: autocast's own arithmetic, without its re-casts."""
import copy
from contextlib import nullcontext

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from tests.engine.test_amp import BATCH, wrapper_for
from xmr.engine.frozen_casts import FrozenWeightCasts


class CountCasts(TorchDispatchMode):
    """Counts dtype conversions (``aten._to_copy``), autocast's casts included."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


def small_model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 4))
    model[0].requires_grad_(False)
    model[1].requires_grad_(False)
    return model


def run(model, x, casts=None, times=3):
    with torch.autocast('cpu', dtype=torch.bfloat16), CountCasts() as counter:
        with casts.swapped_into(model) if casts is not None else nullcontext():
            outputs = [model(x) for _ in range(times)]
    return outputs, counter.count


def test_outputs_equal_autocast_and_the_frozen_linear_is_cast_once():
    model, x = small_model(), torch.randn(5, 6)
    plain, plain_count = run(model, x)
    cached, cached_count = run(model, x, FrozenWeightCasts())
    for got, expected in zip(cached, plain):
        assert torch.equal(got, expected)
    # At each forward autocast casts x and the frozen W_0 and b_0; W_2 and b_2 it casts once
    # (they require grad). Cached, W_0 and b_0 are cast once, not at every forward.
    assert plain_count == 3 * 3 + 2
    assert cached_count == 3 * 1 + 2 + 2


def test_only_frozen_matrix_weights_are_swapped_and_all_come_back():
    model, casts = small_model(), FrozenWeightCasts()
    before = dict(model.named_parameters())
    with torch.autocast('cpu', dtype=torch.bfloat16), casts.swapped_into(model):
        assert model[0].weight.dtype == model[0].bias.dtype == torch.bfloat16
        assert model[1].weight.dtype == torch.float32  # a norm runs in fp32 under autocast
        assert model[2].weight.dtype == torch.float32  # trained: autocast caches it itself
    with pytest.raises(RuntimeError, match='boom'):
        with torch.autocast('cpu', dtype=torch.bfloat16), casts.swapped_into(model):
            raise RuntimeError('boom')
    after = dict(model.named_parameters())
    assert after.keys() == before.keys()
    assert all(after[name] is before[name] for name in before)
    with casts.swapped_into(model):  # outside autocast nothing changes
        assert model[0].weight is before['0.weight']


def test_a_changed_weight_is_cast_again():
    model, x, casts = small_model(), torch.randn(5, 6), FrozenWeightCasts()
    run(model, x, casts, times=1)
    with torch.no_grad():
        model[0].weight.mul_(-1)
    (cached,), _ = run(model, x, casts, times=1)
    (plain,), _ = run(model, x, times=1)
    assert torch.equal(cached, plain)


def test_an_amp_step_with_cached_casts_equals_autocast_and_casts_less(tiny_retriever):
    results = []
    for cast_frozen_weights in (False, True):
        model = copy.deepcopy(tiny_retriever)
        model.set_phase('cross_modal', dict(cm=1.0))
        wrapper = wrapper_for(model, 'AutocastOptimWrapper',
                              cast_frozen_weights=cast_frozen_weights)
        torch.manual_seed(1)
        with CountCasts() as counter:
            losses = [model.train_step(BATCH, wrapper)['loss'] for _ in range(2)]
        results.append((losses, counter.count, model.state_dict()))
    (plain_losses, plain_count, plain_state), (losses, count, state) = results
    assert all(torch.equal(a, b) for a, b in zip(losses, plain_losses))
    assert all(torch.equal(state[key], plain_state[key]) for key in plain_state)
    frozen = sum(1 for module in tiny_retriever.backbone.modules()
                 if isinstance(module, nn.Linear) for _ in module.parameters())
    assert count < plain_count - frozen


def test_a_copy_follows_autocast_s_dtype_when_it_changes():
    model, casts = small_model(), FrozenWeightCasts()
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast('cpu', dtype=dtype), casts.swapped_into(model):
            assert model[0].weight.dtype == dtype


def test_weights_already_in_the_autocast_dtype_and_integer_weights_are_left_as_they_are():
    model, casts = small_model(), FrozenWeightCasts()
    model[0].to(torch.bfloat16)
    model[2].index = nn.Parameter(torch.arange(3), requires_grad=False)
    weight, index = model[0].weight, model[2].index
    with torch.autocast('cpu', dtype=torch.bfloat16), casts.swapped_into(model):
        assert model[0].weight is weight
        assert model[2].index is index


def test_attention_projections_are_swapped_too():
    """xmr's towers read ``nn.MultiheadAttention``'s ``in_proj_weight`` through ``linear``."""
    attention = nn.MultiheadAttention(8, 2).requires_grad_(False)
    with torch.autocast('cpu', dtype=torch.bfloat16), \
            FrozenWeightCasts().swapped_into(attention):
        assert attention.in_proj_weight.dtype == torch.bfloat16
        assert attention.out_proj.weight.dtype == torch.bfloat16


def test_copies_of_weights_the_model_no_longer_has_are_let_go():
    import gc
    import weakref

    casts, old = FrozenWeightCasts(), small_model()
    with torch.autocast('cpu', dtype=torch.bfloat16), casts.swapped_into(old):
        pass
    released = weakref.ref(old[0].weight)
    del old
    with torch.autocast('cpu', dtype=torch.bfloat16), casts.swapped_into(small_model()):
        pass
    gc.collect()
    assert released() is None


def swap_dtypes(model, casts):
    """The dtype of each parameter of ``model`` inside one bf16 swap."""
    with torch.autocast('cpu', dtype=torch.bfloat16), casts.swapped_into(model):
        return {name: parameter.dtype for name, parameter in model.named_parameters()}


def test_the_model_is_walked_once_while_its_modules_stay_the_same():
    model, casts = small_model(), FrozenWeightCasts()
    walks = []
    walk = model.modules
    model.modules = lambda: walks.append(1) or walk()
    for _ in range(3):
        assert swap_dtypes(model, casts)['0.weight'] == torch.bfloat16
    assert len(walks) == 1


def test_a_module_added_after_a_swap_is_swapped_too():
    model, casts = small_model(), FrozenWeightCasts()
    swap_dtypes(model, casts)
    model.append(nn.Linear(4, 3).requires_grad_(False))
    assert swap_dtypes(model, casts)['3.weight'] == torch.bfloat16


def test_a_weight_unfrozen_or_replaced_after_a_swap_is_read_anew():
    model, x, casts = small_model(), torch.randn(5, 6), FrozenWeightCasts()
    swap_dtypes(model, casts)
    model[0].weight.requires_grad_(True)  # a phase that trains it: autocast casts it
    assert swap_dtypes(model, casts)['0.weight'] == torch.float32
    model[0].weight.requires_grad_(False)
    model[0].weight = nn.Parameter(torch.randn(8, 6), requires_grad=False)
    (cached,), _ = run(model, x, casts, times=1)
    (plain,), _ = run(model, x, times=1)
    assert torch.equal(cached, plain)


def test_another_model_built_before_the_first_swap_is_walked_for_its_own_weights():
    first, second, casts = small_model(), small_model(), FrozenWeightCasts()
    swap_dtypes(first, casts)  # nothing registered since: only the model differs
    assert swap_dtypes(second, casts)['0.weight'] == torch.bfloat16


def test_a_parameter_registered_after_a_swap_is_swapped_too():
    model, casts = small_model(), FrozenWeightCasts()
    swap_dtypes(model, casts)
    model[2].register_parameter('scale', nn.Parameter(torch.ones(4), requires_grad=False))
    assert swap_dtypes(model, casts)['2.scale'] == torch.bfloat16
