"""Mixed precision: bf16/fp16 autocast steps whose fp32 evaluation matches fp32 training.

Stated tolerance (docs/benchmarks.md): after two AMP training steps of the tiny retriever, the
fp32 evaluation embeddings ``r^T`` differ from those of the same steps in fp32 by at most 1e-2
relative L2 per caption (measured: ~2e-4 for L_CL in bf16, ~2e-5 in fp16, up to ~3e-3 for L_CM in
bf16, whose τ = 0.01 multiplies the logits' rounding by 100), while the two steps themselves move
``r^T`` by ~5e-2.
"""
import copy
import logging
import math

import pytest
import torch
from mmengine.config import Config
from mmengine.logging import MessageHub
from torch.utils._python_dispatch import TorchDispatchMode

from tests.conftest import MIXED_BATCH as BATCH
from xmr.engine import amp
from xmr.engine.amp import AutocastOptimWrapper, amp_dtype, enable_amp
from xmr.engine.optim import PhasedOptimWrapperConstructor
from xmr.engine.optim_wrapper import OptimWrapper

TOLERANCE = 1e-2


def wrapper_for(model, wrapper: str, **kwargs):
    cfg = dict(type=wrapper, clip_grad=dict(max_norm=1.0), **kwargs,
               optimizer=dict(type='AdamW', lr=1e-3, betas=(0.9, 0.98), eps=1e-6,
                              weight_decay=0.2))
    return PhasedOptimWrapperConstructor(cfg)(model)


def target_embeddings(model) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        data = model.data_preprocessor(BATCH)
        embeddings, _ = model.encode_target(data['target_tokens'], data['langs'])
    return embeddings


def test_cpu_autocasts_to_bf16():
    assert amp_dtype('cpu') is torch.bfloat16


@pytest.mark.parametrize('dtype, named', [(None, 'bfloat16 on cpu'),
                                          ('float16', 'float16 on cpu with dynamic loss scaling')])
def test_the_log_names_the_autocast_dtype_and_that_a_cpu_is_slower(tiny_retriever, monkeypatch,
                                                                    dtype, named):
    logged = []
    monkeypatch.setattr(amp, 'print_log', lambda message, **kwargs: logged.append(
        (message, kwargs.get('level'))))
    wrapper = wrapper_for(tiny_retriever, 'AutocastOptimWrapper', dtype=dtype)
    with wrapper.optim_context(tiny_retriever):
        pass
    with wrapper.optim_context(tiny_retriever):
        pass
    assert logged == [(f'mixed precision: autocast to {named}; on a CPU this is slower than '
                       'fp32 (casts around every matmul, no bf16 units on most CPUs): drop --amp '
                       'unless you measured a gain', logging.WARNING)]


@pytest.mark.parametrize('dtype, phase, weights', [
    ('bfloat16', 'cross_lingual', dict(cl=1.0)),
    ('bfloat16', 'cross_modal', dict(cm=1.0)),
    ('float16', 'cross_lingual', dict(cl=1.0)),
])
def test_fp32_evaluation_after_amp_steps_matches_fp32_training(tiny_retriever, dtype, phase,
                                                               weights):
    tiny_retriever.set_phase(phase, weights)
    reference, mixed = tiny_retriever, copy.deepcopy(tiny_retriever)
    untrained = target_embeddings(copy.deepcopy(tiny_retriever))
    fp32 = wrapper_for(reference, 'OptimWrapper')
    amp = wrapper_for(mixed, 'AutocastOptimWrapper', dtype=dtype,
                      loss_scale=dict(init_scale=1024.0))
    for _ in range(2):
        fp32_losses = reference.train_step(BATCH, fp32)
        amp_losses = mixed.train_step(BATCH, amp)
        torch.testing.assert_close(amp_losses['loss'], fp32_losses['loss'], rtol=2e-2, atol=0)
    if dtype == 'float16':
        assert amp.scaler is not None and amp.scaler.get_scale() == 1024.0  # no skipped step
    else:
        assert amp.scaler is None
    expected, got = target_embeddings(reference), target_embeddings(mixed)
    change = ((expected - untrained).norm(dim=-1) / expected.norm(dim=-1)).min()
    error = ((got - expected).norm(dim=-1) / expected.norm(dim=-1)).max()
    assert error <= TOLERANCE < change  # training moved r^T further than AMP perturbed it


def test_fp16_step_with_overflowing_gradients_is_skipped(tiny_retriever):
    wrapper = wrapper_for(tiny_retriever, 'AutocastOptimWrapper', dtype='float16',
                          loss_scale=dict(init_scale=1024.0))
    before = {k: v.clone() for k, v in tiny_retriever.state_dict().items()
              if isinstance(v, torch.Tensor)}
    with wrapper.optim_context(tiny_retriever):
        data = tiny_retriever.data_preprocessor(BATCH, True)
        loss = tiny_retriever(mode='loss', **data)['loss_cl']
    wrapper.backward(loss * float('inf'))
    wrapper.step()
    after = tiny_retriever.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert wrapper.scaler.get_scale() == 512.0  # halved after the overflow


def test_loss_scaler_state_is_saved_and_restored(tiny_retriever):
    wrapper = wrapper_for(tiny_retriever, 'AutocastOptimWrapper', dtype='float16',
                          loss_scale=dict(init_scale=64.0))
    tiny_retriever.train_step(BATCH, wrapper)
    state = wrapper.state_dict()
    assert state['loss_scaler']['scale'] == 64.0
    fresh = wrapper_for(tiny_retriever, 'AutocastOptimWrapper', dtype='float16')
    fresh.load_state_dict(state)
    assert fresh.scaler.get_scale() == 64.0
    assert 'loss_scaler' in state  # the caller's checkpoint is left whole


def test_enable_amp_switches_the_wrapper_and_refuses_others():
    cfg = Config(dict(optim_wrapper=dict(type='OptimWrapper', optimizer=dict(type='AdamW'))))
    enable_amp(cfg, 'float16')
    assert cfg.optim_wrapper.type == 'AutocastOptimWrapper'
    assert cfg.optim_wrapper.dtype == 'float16'
    with pytest.raises(ValueError, match="dtype must be one of .*got 'fp8'"):
        enable_amp(cfg, 'fp8')
    other = Config(dict(optim_wrapper=dict(type='AmpOptimWrapper')))
    with pytest.raises(ValueError, match='cannot wrap optim_wrapper type AmpOptimWrapper'):
        enable_amp(other)
    with pytest.raises(ValueError, match="must be one of .*got 'half'"):
        AutocastOptimWrapper(dtype='half', optimizer=torch.optim.SGD([torch.zeros(1)], lr=1))


@pytest.mark.parametrize('native, expected', [(True, torch.bfloat16), (False, torch.float16)])
def test_cuda_autocasts_to_bf16_where_native_else_fp16(monkeypatch, native, expected):
    """torch's default counts emulated bf16 (sm_7x: T4, V100) as supported, where fp16 is
    the fast precision: the emulation must not count."""
    monkeypatch.setattr(torch.cuda, 'is_bf16_supported',
                        lambda including_emulation=True: including_emulation or native)
    assert amp_dtype('cuda') is expected


@pytest.mark.parametrize('loss_scale, message', [
    ('dynamic', r"loss_scale='dynamic' must be a dict of torch.amp.GradScaler arguments "
                r'\(init_scale, growth_factor, backoff_factor, growth_interval, enabled\), '
                r'or None'),
    (512.0, 'loss_scale=512.0 must be a dict'),
    (dict(init_scal=8.0), r"GradScaler takes no \['init_scal'\]; it takes init_scale, "),
])
def test_a_loss_scale_the_scaler_cannot_take_is_refused_when_the_wrapper_is_built(loss_scale,
                                                                                 message):
    """It failed at the first fp16 step, after the data and any validation at the start."""
    with pytest.raises(ValueError, match=message):
        AutocastOptimWrapper(dtype='float16', loss_scale=loss_scale,
                             optimizer=torch.optim.SGD([torch.zeros(1)], lr=1))


def test_a_loss_scale_under_bf16_is_said_to_be_unused(monkeypatch):
    said = []
    monkeypatch.setattr(amp, 'print_log', lambda message, **kwargs: said.append(
        (message, kwargs.get('level'))))
    wrapper = AutocastOptimWrapper(dtype='bfloat16', loss_scale=dict(init_scale=8.0),
                                   optimizer=torch.optim.SGD([torch.zeros(1)], lr=1))
    wrapper._resolve()
    assert wrapper.scaler is None
    assert ("optim_wrapper.loss_scale={'init_scale': 8.0} is unused: torch.bfloat16 autocast "
            'needs no loss scaling (only float16 has it)', logging.WARNING) in said


def test_a_device_that_resolves_to_fp16_refuses_a_compiled_step(monkeypatch):
    """``dtype=None`` picks fp16 on GPUs without bf16, whose loss scaler a compiled step
    cannot run: refused when the precision resolves, not only when fp16 was asked."""
    monkeypatch.setattr(amp, 'amp_dtype', lambda device_type: torch.float16)
    weight = torch.nn.Parameter(torch.zeros(2))
    wrapper = AutocastOptimWrapper(optimizer=torch.optim.AdamW([weight], foreach=True,
                                                               capturable=True),
                                   compiled_step=dict())
    with pytest.raises(ValueError, match="cannot compile fp16's loss-scaled step"):
        with wrapper.optim_context(torch.nn.ParameterList([weight])):
            pass


def fp16_sgd_step(grad_scale: float, **kwargs) -> tuple[torch.Tensor, AutocastOptimWrapper]:
    """One fp16 SGD step (lr 1) of a weight ``[0, 0]`` whose gradient is ``[3, 4] x
    grad_scale``, clipped to norm 1: the weight and the wrapper."""
    weight = torch.nn.Parameter(torch.zeros(2))
    wrapper = AutocastOptimWrapper(dtype='float16', optimizer=torch.optim.SGD([weight], lr=1.0),
                                   clip_grad=dict(max_norm=1.0),
                                   loss_scale=dict(init_scale=256.0), **kwargs)
    wrapper.message_hub = MessageHub.get_instance(f'fp16_sgd_step_{grad_scale}')
    with wrapper.optim_context(torch.nn.ParameterList([weight])):
        loss = (weight * torch.tensor([3.0, 4.0]) * grad_scale).sum()
    wrapper.update_params(loss)
    return weight.detach(), wrapper


def test_fp16_clips_the_unscaled_gradients_and_says_nothing_of_a_step_it_took(monkeypatch):
    said = []
    monkeypatch.setattr(amp, 'print_log', lambda message, **kwargs: said.append(message))
    weight, wrapper = fp16_sgd_step(1.0)
    # norm 5, clipped to 1 (torch's scale 1 / (5 + 1e-6)): the step is -[3, 4] / 5.
    assert weight.tolist() == pytest.approx([-0.6, -0.8], rel=1e-5)
    assert float(wrapper.pending_norm) == pytest.approx(5.0)
    assert wrapper.scaler.get_scale() == 256.0
    assert not [message for message in said if 'skipped' in message]


def test_an_overflowed_fp16_step_is_said_once_and_its_norm_not_logged(monkeypatch):
    from xmr.engine import optim_wrapper

    said = []
    monkeypatch.setattr(amp, 'print_log', lambda message, **kwargs: said.append(message))
    monkeypatch.setattr(optim_wrapper, 'print_log', lambda message, **kwargs: said.append(
        message))
    weight, wrapper = fp16_sgd_step(math.inf)
    assert weight.tolist() == [0.0, 0.0]
    wrapper.log_pending_norm()
    assert [message for message in said if 'skipped' in message] == [
        'fp16: optimiser step skipped (gradients overflowed at loss scale 256); the loss scale '
        'is now 128']
    assert 'train/grad_norm' not in wrapper.message_hub.log_scalars


def test_frozen_weights_are_cast_once_by_default():
    wrapper = AutocastOptimWrapper(optimizer=torch.optim.SGD([torch.zeros(1)], lr=1.0))
    assert wrapper.cast_frozen_weights is True


def test_enable_amp_without_a_dtype_keeps_the_config_s_choice():
    cfg = Config(dict(optim_wrapper=dict(type='AutocastOptimWrapper', dtype='float16')))
    enable_amp(cfg)
    assert cfg.optim_wrapper.dtype == 'float16'
    plain = Config(dict(optim_wrapper=dict(type='OptimWrapper')))
    enable_amp(plain)
    assert 'dtype' not in plain.optim_wrapper


def test_fp16_skips_non_finite_steps_with_an_unfused_optimiser_too():
    """The loss scaler skips the step whatever the optimiser (SGD here, which takes no
    ``found_inf``); bf16 without a fused optimiser skips nothing."""
    weight, fp16 = fp16_sgd_step(math.inf)
    assert fp16.skips_nonfinite_steps and weight.tolist() == [0.0, 0.0]
    bf16 = AutocastOptimWrapper(dtype='bfloat16', clip_grad=dict(max_norm=1.0),
                                optimizer=torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))],
                                                          lr=1.0))
    assert not bf16.skips_nonfinite_steps


class DeviceReads(TorchDispatchMode):
    """The names of the ops dispatched, a read of a value to the host being
    ``_local_scalar_dense`` (``.item()``, ``float()``: on a GPU, a wait for the device)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func._overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def test_an_fp16_step_reads_the_loss_scale_only_after_its_update():
    weight = torch.nn.Parameter(torch.ones(2))
    wrapper = AutocastOptimWrapper(
        dtype='float16', clip_grad=dict(max_norm=1.0), loss_scale=dict(init_scale=256.0),
        optimizer=torch.optim.AdamW([weight], lr=0.1, fused=True))
    wrapper.message_hub = MessageHub.get_instance('fp16_reads_the_scale_after_its_update')
    for step in range(3):
        with wrapper.optim_context(torch.nn.ParameterList([weight])):
            loss = (weight * torch.tensor([3.0, 4.0])).sum()
        wrapper.backward(loss)
        with DeviceReads() as reads:
            wrapper.step()
        wrapper.zero_grad()
        if step:  # the first step reads the scale it starts at
            update = reads.ops.index('_amp_update_scale_')
            assert '_local_scalar_dense' not in reads.ops[:update], step
    assert wrapper.scaler.get_scale() == 256.0  # no overflow: no step was said skipped


# MMEngine's wrapper builds torch.cuda.amp's deprecated GradScaler, disabled without CUDA.
@pytest.mark.filterwarnings('ignore:`torch.cuda.amp.GradScaler',
                            'ignore:torch.cuda.amp.GradScaler is enabled')
def test_mmengine_amp_wrapper_counts_windows_per_phase_without_mmengine_warning(monkeypatch):
    """``type='AmpOptimWrapper'`` built MMEngine's, whose count at a resume warned that
    gradients were lost (``Resumed iteration number is not divisible ...``) by the run's
    iteration: 6 at windows of 4, where the phase begun at 2 has done one whole window."""
    from mmengine.optim.optimizer import amp_optimizer_wrapper, optimizer_wrapper
    from mmengine.registry import DefaultScope

    from xmr.registry import OPTIM_WRAPPERS

    # MMEngine's wrapper asserts a GPU as it is built; the counting is the same without one.
    monkeypatch.setattr(amp_optimizer_wrapper, 'is_cuda_available', lambda: True)
    logged = []
    monkeypatch.setattr(optimizer_wrapper, 'print_log', lambda message, **kwargs:
                        logged.append(message))
    model = torch.nn.Linear(2, 2)
    with DefaultScope.overwrite_default_scope('xmr'):
        wrapper = OPTIM_WRAPPERS.build(dict(
            type='AmpOptimWrapper', accumulative_counts=4,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1)))
    wrapper.initialize_count_status(model, 6, 20)  # the runner's: the run's iteration
    wrapper.initialize_count_status(model, 4, 18)  # the loop's: the phase's (18 iterations)
    assert logged == []
    # 4 of the phase's iterations done; its last window holds 18 % 4 = 2 iterations.
    assert (wrapper._inner_count, wrapper._max_counts, wrapper._remainder_counts) == (4, 18, 2)


def fp16_window_wrapper(weight: torch.nn.Parameter, counts: int, iters: int,
                        **loss_scale) -> AutocastOptimWrapper:
    """An fp16 wrapper around SGD (lr 1) on ``weight``, its windows of ``counts`` iterations
    counted over ``iters``, its scaler doubling the scale at every step it takes
    (``growth_interval=1``) from ``init_scale`` 4 (as given)."""
    wrapper = AutocastOptimWrapper(dtype='float16', accumulative_counts=counts,
                                   loss_scale={'init_scale': 4.0, 'growth_interval': 1,
                                               **loss_scale},
                                   optimizer=torch.optim.SGD([weight], lr=1.0))
    wrapper.initialize_count_status(torch.nn.Linear(1, 1), 0, iters)
    return wrapper


def squared_error(weight: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor
                  ) -> torch.Tensor:
    """The batch's mean squared error of the linear model ``inputs @ weight``."""
    return ((inputs @ weight - targets) ** 2).mean()


#: Four items of a linear regression, in small integers (exact in fp16), as two micro-batches.
INPUTS = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.0, 1.0], [2.0, 2.0]])
TARGETS = torch.tensor([1.0, -2.0, 3.0, 0.0])


def test_an_fp16_window_steps_once_on_the_full_batch_gradient_and_updates_the_scale_once():
    """Accumulated over a window of 2, the micro-batches' losses each divided by the window,
    the step is the full batch's by hand (the gradient of the mean squared error,
    ``2/N X^T (X w - t)``, at w = 0: ``-2/N X^T t``); the scaler unscales and updates once per
    window, not at each micro-step (the scale doubles once per step, not twice), and the
    window's gradients are held at the scale while it runs."""
    weight = torch.nn.Parameter(torch.zeros(2))
    wrapper = fp16_window_wrapper(weight, counts=2, iters=4)
    module = torch.nn.ParameterList([weight])
    for half in (slice(0, 2), slice(2, 4)):
        with wrapper.optim_context(module):
            loss = squared_error(weight, INPUTS[half], TARGETS[half])
        wrapper.update_params(loss)
        if half.start == 0:  # inside the window: nothing stepped, the gradient still scaled
            assert weight.tolist() == [0.0, 0.0] and wrapper.scaler.get_scale() == 4.0
            half_gradient = -2 / 2 * INPUTS[:2].T @ TARGETS[:2] / 2  # divided by the window
            torch.testing.assert_close(weight.grad, 4.0 * half_gradient)
    full_gradient = -2 / 4 * INPUTS.T @ TARGETS
    torch.testing.assert_close(weight.detach(), -full_gradient)
    assert wrapper.scaler.get_scale() == 8.0 and weight.grad is None


def test_an_fp16_phase_s_last_short_window_is_divided_by_its_own_length():
    """Three iterations at windows of 2: the second window is one micro-batch, undivided
    (MMEngine's remainder), and the scale doubles at each of the two steps."""
    weight = torch.nn.Parameter(torch.zeros(2))
    wrapper = fp16_window_wrapper(weight, counts=2, iters=3)
    module = torch.nn.ParameterList([weight])
    for item in range(3):
        with wrapper.optim_context(module):
            loss = squared_error(weight, INPUTS[item:item + 1], TARGETS[item:item + 1])
        wrapper.update_params(loss)
    # The first window: the two items' gradients at w = 0 (-2 x t each), each halved.
    expected = -(-2 * INPUTS[:2].T @ TARGETS[:2]) / 2
    # The second: the third item's whole gradient, at the weights the first step left.
    third = 2 * INPUTS[2] * (INPUTS[2] @ expected - TARGETS[2])
    torch.testing.assert_close(weight.detach(), expected - third)
    assert wrapper.scaler.get_scale() == 16.0


def test_an_overflow_inside_an_fp16_window_skips_the_window_s_one_step_and_halves_once():
    weight = torch.nn.Parameter(torch.zeros(2))
    wrapper = fp16_window_wrapper(weight, counts=2, iters=4)
    module = torch.nn.ParameterList([weight])
    for scale in (math.inf, 1.0):
        with wrapper.optim_context(module):
            loss = squared_error(weight, INPUTS[:2], TARGETS[:2]) * scale
        wrapper.update_params(loss)
    assert weight.tolist() == [0.0, 0.0] and wrapper.scaler.get_scale() == 2.0


def half_window(wrapper, weight: torch.nn.Parameter) -> dict:
    """The state of ``wrapper`` after the first micro-batch of a window of 2."""
    with wrapper.optim_context(torch.nn.ParameterList([weight])):
        loss = squared_error(weight, INPUTS[:2], TARGETS[:2])
    wrapper.update_params(loss)
    return wrapper.state_dict()


def finish_window(wrapper, weight: torch.nn.Parameter) -> list[float]:
    with wrapper.optim_context(torch.nn.ParameterList([weight])):
        loss = squared_error(weight, INPUTS[2:], TARGETS[2:])
    wrapper.update_params(loss)
    return weight.tolist()


@pytest.mark.parametrize('saved_under, resumed_under', [
    ('float16', 'float32'), ('float32', 'float16'), ('float16', 'float16')])
def test_a_window_saved_under_one_precision_resumes_under_another_on_the_same_gradients(
        saved_under, resumed_under):
    """A checkpoint inside a window holds its gradients so far (``pending_grads``), which fp16
    holds multiplied by its loss scale: resumed without fp16 they stepped 2^16 times too far,
    and fp32's resumed under fp16 were divided by the scale at its unscale. The resumed window
    steps as the uninterrupted run does (its full batch's gradient, as by hand above)."""
    def wrapper_for_precision(precision: str, weight: torch.nn.Parameter):
        if precision == 'float16':  # a scale of its own, not the one the window was saved at
            return fp16_window_wrapper(weight, counts=2, iters=2, init_scale=64.0)
        wrapper = OptimWrapper(torch.optim.SGD([weight], lr=1.0), accumulative_counts=2)
        wrapper.initialize_count_status(torch.nn.Linear(1, 1), 0, 2)
        return wrapper

    saving = torch.nn.Parameter(torch.zeros(2))
    state = half_window(wrapper_for_precision(saved_under, saving), saving)
    resumed = torch.nn.Parameter(torch.zeros(2))
    wrapper = wrapper_for_precision(resumed_under, resumed)
    wrapper.load_state_dict(state)
    wrapper._inner_count = 1  # the loop's count at the resumed iteration
    full_gradient = -2 / 4 * INPUTS.T @ TARGETS
    assert finish_window(wrapper, resumed) == pytest.approx((-full_gradient).tolist())
