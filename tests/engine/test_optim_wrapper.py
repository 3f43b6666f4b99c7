"""xmr's OptimWrapper: MMEngine's, with the clipped gradients' norm logged after the step's
losses are read rather than inside the step."""
from __future__ import annotations

import logging
import math
from typing import Any

import pytest
import torch
from mmengine.logging import MessageHub

from tests.conftest import assert_same_checkpoint
from tests.engine.test_loops import PHASES, make_cfg, train
from xmr.engine.amp import AutocastOptimWrapper
from xmr.engine.optim_wrapper import OptimWrapper, window_grads_for_this_rank


def test_a_step_keeps_the_clipped_norm_until_it_is_logged():
    weight = torch.nn.Parameter(torch.zeros(2))
    wrapper = OptimWrapper(torch.optim.SGD([weight], lr=1.0), clip_grad=dict(max_norm=1.0))
    hub = wrapper.message_hub = MessageHub.get_instance('test_pending_norm')
    weight.grad = torch.tensor([3.0, 4.0])  # norm 5: scaled by 1 / (5 + 1e-6)
    wrapper.step()
    assert weight.detach().tolist() == pytest.approx([-0.6, -0.8], rel=1e-5)
    assert float(wrapper.pending_norm) == pytest.approx(5.0)
    assert 'train/grad_norm' not in hub.log_scalars
    wrapper.log_pending_norm()
    assert wrapper.pending_norm is None
    assert hub.get_scalar('train/grad_norm').current() == pytest.approx(5.0)
    # A dropped norm (an iteration with a non-finite loss) is not logged.
    weight.grad = torch.tensor([6.0, 8.0])
    wrapper.step()
    wrapper.log_pending_norm(log=False)
    assert wrapper.pending_norm is None
    assert list(hub.get_scalar('train/grad_norm').data[0]) == pytest.approx([5.0])


def test_a_run_logs_the_norms_mmengine_s_wrapper_logs(tmp_path):
    logged = {}
    for wrapper in ('OptimWrapper', 'mmengine.OptimWrapper'):
        torch.manual_seed(0)
        cfg = make_cfg(tmp_path / wrapper.replace('.', '_'))
        cfg.optim_wrapper.type = wrapper
        runner, records = train(cfg)
        assert type(runner.optim_wrapper).__module__.startswith(
            'xmr.' if wrapper == 'OptimWrapper' else 'mmengine.')
        norms = list(runner.message_hub.get_scalar('train/grad_norm').data[0])
        logged[wrapper] = norms, [record['losses']['loss'] for record in records]
    (norms, losses), (reference_norms, reference_losses) = logged.values()
    # Every step logged its loss; the norms' window holds the last phase's (each phase
    # starts its own, as its losses').
    assert len(losses) == sum(phase['iters'] for phase in PHASES)
    assert len(norms) == PHASES[-1]['iters']
    assert norms == pytest.approx(reference_norms, rel=1e-6)
    assert losses == pytest.approx(reference_losses, rel=1e-6)


#: The learning rate of ``three_dasd_steps``: AdamW moves an element by about this much a step.
THREE_STEPS_LR = 1e-2


def three_dasd_steps(compile: dict, compiled_autograd: dict | None,
                     device: torch.device | str = 'cpu'
                     ) -> tuple[torch.Tensor, list[torch.Tensor], list[int]]:
    """DASD's losses, compiled with ``compile``, trained three steps on one batch through xmr's
    wrapper with ``compiled_autograd``: the losses ``[3]`` and the trained weights, on the CPU,
    and how many times compiled autograd had traced the backward after each step."""
    from torch._dynamo.utils import counters

    from tests.configs.test_dasd_configs import batch
    from tests.models.retrievers.test_compiled_losses import dasd

    langs = ['de', 'fr', 'cs', 'de']
    model = dasd(compile).to(device)
    trained = [p for p in model.parameters() if p.requires_grad]
    wrapper = OptimWrapper(torch.optim.AdamW(trained, lr=THREE_STEPS_LR),
                           clip_grad=dict(max_norm=1.0), compiled_autograd=compiled_autograd)
    torch._dynamo.reset()
    counters.clear()
    losses, captures = [], []
    for _ in range(3):
        torch.manual_seed(1)  # the discriminator's shuffled negatives
        losses.append(model.train_step(dict(batch(langs), lang=langs), wrapper)['loss'].detach())
        captures.append(counters['compiled_autograd']['captures'])
    return torch.stack(losses).cpu(), [p.detach().cpu() for p in trained], captures


@pytest.mark.slow
def test_compiled_autograd_traces_the_backward_once_and_trains_as_autograd_s_engine():
    """DASD's compiled losses, three steps on one batch: the backward traced whole (compiled
    autograd) gives the losses and weights of autograd's engine, bit for bit under AOTAutograd's
    eager graphs, and is traced at the first step only."""
    from tests.models.retrievers.test_compiled_losses import TRACED

    engine_losses, engine_weights, untraced = three_dasd_steps(TRACED, None)
    losses, weights, captures = three_dasd_steps(TRACED, TRACED)
    assert (untraced, captures) == ([0, 0, 0], [1, 1, 1])
    torch.testing.assert_close(losses, engine_losses, rtol=0, atol=0)
    assert engine_losses[2] != engine_losses[0]
    for mine, reference in zip(weights, engine_weights, strict=True):
        torch.testing.assert_close(mine, reference, rtol=0, atol=0)


def test_compiled_autograd_is_refused_where_it_cannot_trace(monkeypatch):
    from xmr.engine import optim_wrapper as module
    from xmr.engine.optim import HybridOptimizer

    weight, table = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3, 2))
    with pytest.raises(ValueError, match='must be a dict of torch.compile options'):
        OptimWrapper(torch.optim.SGD([weight], lr=1.0), compiled_autograd='reduce-overhead')
    hybrid = HybridOptimizer(torch.optim.AdamW([weight]), torch.optim.SparseAdam([table]))
    with pytest.raises(ValueError, match='sparse gradients of an embedding table'):
        OptimWrapper(hybrid, compiled_autograd=dict(backend='eager'))
    wrapper = OptimWrapper(torch.optim.SGD([weight], lr=1.0),
                           compiled_autograd=dict(backend='eager'))
    monkeypatch.setattr(module, 'is_distributed', lambda: True)
    with pytest.raises(RuntimeError, match='traces no DDP gradient hook'):
        wrapper.backward((weight * 2).sum())
    assert weight.grad is None


def clipped_adamw_step(wrapper: OptimWrapper, step: int) -> None:
    """Step ``step`` of :func:`clipped_adamw_steps`: random gradients, a new lr per group."""
    for group in wrapper.optimizer.param_groups:
        for parameter in group['params']:
            # Drawn on the device: a copy from the host's pageable memory would wait for it.
            parameter.grad = torch.randn(parameter.shape, device=parameter.device)
    for index, group in enumerate(wrapper.optimizer.param_groups):
        group['lr'] = 1e-2 * (1 + index) / (1 + step)  # as the loop sets them, floats
    wrapper.step()


def clipped_adamw_steps(optimizer_options: dict, compiled_step: dict | None,
                        device: torch.device | str = 'cpu', **amp: Any
                        ) -> tuple[list[torch.Tensor], list[float], list[int], OptimWrapper]:
    """Three clipped AdamW steps through xmr's wrapper (``AutocastOptimWrapper`` given the
    ``amp`` options) over a decayed weight ``[8, 4]`` and an undecayed bias ``[4]``, random
    gradients and a new lr at every step: the trained tensors (on the CPU), the clipped norms,
    the graphs compiled so far after each step, the wrapper."""
    from torch._dynamo.utils import counters
    from torch._inductor.cudagraph_trees import reset_cudagraph_trees

    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(8, 4).to(device))
    bias = torch.nn.Parameter(torch.randn(4).to(device))
    optimizer = torch.optim.AdamW([dict(params=[weight], weight_decay=0.1),
                                   dict(params=[bias], weight_decay=0.0)],
                                  lr=1e-2, **optimizer_options)
    wrapper = (AutocastOptimWrapper if amp else OptimWrapper)(
        optimizer=optimizer, clip_grad=dict(max_norm=1.0), compiled_step=compiled_step, **amp)
    if amp:  # the first forward's context resolves the precision, before any step
        with wrapper.optim_context(torch.nn.ParameterList([weight, bias])):
            pass
    torch._dynamo.reset()
    # Dynamo traces an optimiser beside the process's CUDA graph trees: on an H200 (torch 2.11)
    # it failed an assertion on a tree without a current graph. Each run starts without trees.
    reset_cudagraph_trees()
    counters.clear()
    norms, graphs = [], []
    for step in range(3):
        clipped_adamw_step(wrapper, step)
        norms.append(float(wrapper.pending_norm))
        graphs.append(counters['stats']['unique_graphs'])
    return [weight.detach().cpu(), bias.detach().cpu()], norms, graphs, wrapper


def test_a_compiled_step_updates_as_the_fused_step_and_compiles_nothing_for_a_new_lr():
    """Inductor's compiled clip and foreach AdamW (lr a device tensor) against torch's fused
    AdamW run eagerly, three steps with three learning rates per group."""
    reference, reference_norms, _, _ = clipped_adamw_steps(dict(fused=True), None)
    trained, norms, graphs, wrapper = clipped_adamw_steps(
        dict(foreach=True, capturable=True), dict())
    assert norms == pytest.approx(reference_norms, rel=1e-6)
    assert norms[0] > 1.0  # the clip scaled the gradients
    for mine, expected in zip(trained, reference):
        torch.testing.assert_close(mine, expected, rtol=1e-6, atol=1e-6)
    torch.manual_seed(0)
    assert not torch.allclose(reference[0], torch.randn(8, 4), atol=1e-3)  # the steps moved it
    # The clip's graph and the optimiser's (torch's optimisers break the graph before their
    # step); the third step's new lr compiles nothing.
    assert graphs[0] == 2 and graphs[2] == graphs[1]
    # The groups keep float rates (schedulers, logs, the state dict).
    assert [group['lr'] for group in wrapper.optimizer.param_groups] == [1e-2 / 3, 2e-2 / 3]
    assert [group['lr'] for group in wrapper.optimizer.state_dict()['param_groups']] == \
        [1e-2 / 3, 2e-2 / 3]


def test_a_compiled_step_under_bf16_autocast_updates_as_the_fused_step():
    """AutocastOptimWrapper adds fp16's scaler to what skips a non-finite step; the compiled
    step must not read that (Dynamo took a property reached through super() as true, and the
    step failed on a foreach optimiser's missing found_inf)."""
    reference, reference_norms, _, _ = clipped_adamw_steps(dict(fused=True), None)
    trained, norms, _, wrapper = clipped_adamw_steps(
        dict(foreach=True, capturable=True), dict(backend='eager'), dtype='bfloat16')
    assert isinstance(wrapper, AutocastOptimWrapper) and not wrapper.skips_nonfinite_steps
    assert norms == pytest.approx(reference_norms, rel=1e-6)
    for mine, expected in zip(trained, reference):
        torch.testing.assert_close(mine, expected, rtol=1e-6, atol=1e-6)


def test_a_compiled_step_is_refused_where_it_cannot_trace():
    from xmr.engine.optim import HybridOptimizer

    weight, table = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="group 0 is fused, which torch.compile does not trace"):
        OptimWrapper(torch.optim.AdamW([weight], fused=True), compiled_step=dict())
    with pytest.raises(ValueError, match="group 'adapters' has capturable=False"):
        OptimWrapper(torch.optim.AdamW([dict(params=[weight], name='adapters')]),
                     compiled_step=dict())
    hybrid = HybridOptimizer(torch.optim.AdamW([weight], foreach=True, capturable=True),
                             torch.optim.SparseAdam([table]))
    with pytest.raises(ValueError, match='compiled_step cannot trace the sparse gradients'):
        OptimWrapper(hybrid, compiled_step=dict())
    capturable = torch.optim.AdamW([weight], foreach=True, capturable=True)
    with pytest.raises(ValueError, match="use dtype='bfloat16', or drop compiled_step"):
        AutocastOptimWrapper(dtype='float16', optimizer=capturable, compiled_step=dict())
    AutocastOptimWrapper(dtype='bfloat16', optimizer=capturable, compiled_step=dict())
    for graphs in (dict(mode='reduce-overhead'), dict(mode='max-autotune'),
                   dict(options={'triton.cudagraphs': True})):
        with pytest.raises(ValueError, match=r"as CUDA graphs, .* compiled_step=dict\(\) or"):
            OptimWrapper(capturable, compiled_step=graphs)
    OptimWrapper(capturable, compiled_step=dict(mode='max-autotune-no-cudagraphs'))


@pytest.mark.slow
def test_a_phased_run_with_a_compiled_step_trains_and_resumes_as_the_eager_run(tmp_path):
    """The loop's run (three phases, an lr schedule each, the state restarted at each phase)
    with the clip and AdamW traced by Dynamo, stopped after 7 iterations and resumed, against
    the eager run with fused AdamW. The graphs are those of each phase's trained tensors (a
    clip and a step each), none for an lr."""
    from torch._dynamo.utils import counters

    def compiled(cfg):
        cfg.optim_wrapper.compiled_step = dict(backend='eager')
        return cfg

    # The source phase trains the projections alone: Dynamo's tracing of a step grows with its
    # tensors, 74 for the whole tiny backbone, and each of the three compiled runs traces anew.
    phases = [dict(PHASES[0], trainable=['backbone.clip.text_projection',
                                         'backbone.clip.visual.proj', 'losses.source_cm']),
              *PHASES[1:]]
    torch.manual_seed(0)
    _, eager = train(make_cfg(tmp_path / 'eager', phases))
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    work_dir = tmp_path / 'compiled'
    runner, first = train(compiled(make_cfg(work_dir, phases, checkpoint_interval=7,
                                            stop_after=7)))
    defaults = runner.optim_wrapper.optimizer.defaults
    assert (defaults['foreach'], defaults['capturable'], defaults['fused']) == (True, True, None)
    assert [r['phase'] for r in first] == ['source_finetune'] * 4 + ['cross_lingual'] * 3
    assert counters['stats']['unique_graphs'] == 4
    torch.manual_seed(123)
    _, resumed = train(compiled(make_cfg(work_dir, phases,
                                         resume_from=work_dir / 'iter_7.pth')))
    assert len(first) + len(resumed) == len(eager) == 16
    torch.manual_seed(0)
    _, whole = train(compiled(make_cfg(tmp_path / 'whole', phases, checkpoint_interval=7)))
    assert [r['losses'] for r in first + resumed] == [r['losses'] for r in whole]
    assert_same_checkpoint(work_dir / 'iter_16.pth', tmp_path / 'whole' / 'iter_16.pth')
    # The eager run steps with fused AdamW, another kernel than the traced foreach step, whose
    # roundings part by up to 8.1e-6 of a loss on CPU (measured); a resume adds nothing (above).
    for mine, reference in zip(first + resumed, eager):
        assert mine['lrs'] == reference['lrs']
        assert mine['losses'] == pytest.approx(reference['losses'], rel=2e-5, abs=1e-6)


def adamw_after(grads: list[torch.Tensor], device: torch.device | str = 'cpu',
                **options) -> tuple[torch.Tensor, dict, OptimWrapper]:
    """A weight ``[3]`` on ``device`` after one clipped AdamW step per gradient in ``grads``:
    the weight, its optimiser state and the wrapper."""
    weight = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5], device=device))
    wrapper = OptimWrapper(torch.optim.AdamW([weight], lr=0.1, **options),
                           clip_grad=dict(max_norm=1.0))
    wrapper.message_hub = MessageHub.get_instance('test_skipped_steps')
    for grad in grads:
        weight.grad = grad.to(device, copy=True)  # the clip scales it in place
        wrapper.step()
    return weight.detach(), wrapper.optimizer.state[weight], wrapper


def assert_a_fused_step_with_non_finite_gradients_updates_nothing(
        bad: float, device: torch.device | str = 'cpu') -> None:
    """Between two finite steps, a step whose gradient holds ``bad``: the weight, the moments
    and the step count are those of the two finite steps alone."""
    first, second = torch.tensor([3.0, 0.0, -4.0]), torch.tensor([0.1, 0.2, -0.3])
    expected, expected_state, _ = adamw_after([first, second], device, fused=True)
    weight, state, wrapper = adamw_after([first, torch.tensor([0.1, bad, 0.0]), second],
                                         device, fused=True)
    assert wrapper.skips_nonfinite_steps
    assert torch.equal(weight, expected)
    assert int(state['step']) == int(expected_state['step']) == 2
    for moment in ('exp_avg', 'exp_avg_sq'):
        assert torch.equal(state[moment], expected_state[moment])
    assert not hasattr(wrapper.optimizer, 'found_inf')  # the flag lives for the step only


@pytest.mark.parametrize('bad', [math.nan, math.inf], ids=['nan', 'inf'])
def test_a_fused_step_with_non_finite_gradients_updates_nothing(bad):
    assert_a_fused_step_with_non_finite_gradients_updates_nothing(bad)


def test_a_skipped_step_is_said_not_logged_and_an_unfused_step_is_not_skipped(monkeypatch):
    from xmr.engine import optim_wrapper as module

    said = []
    monkeypatch.setattr(module, 'print_log', lambda message, **_: said.append(message))
    _, _, wrapper = adamw_after([torch.tensor([math.nan, 0.0, 0.0])], fused=True)
    wrapper.log_pending_norm()
    assert said == ["optimiser step skipped (1 so far in this run): the clipped "
                    "gradients' norm is nan; the weights and the optimiser's state are as they "
                    "were"]
    assert 'train/grad_norm' not in wrapper.message_hub.log_scalars
    wrapper.message_hub.update_info('iter', 6)
    wrapper.pending_norm = torch.tensor(math.inf)
    wrapper.log_pending_norm()
    assert said[1].startswith('optimiser step skipped at iteration 7 (2 so far in this run)')
    # The per-tensor loop takes no flag: NaN reaches the weight.
    weight, _, unfused = adamw_after([torch.tensor([math.nan, 0.0, 0.0])], foreach=False)
    assert not unfused.skips_nonfinite_steps
    assert torch.isnan(weight).all()


@pytest.mark.parametrize('clip_grad', [None, dict(type='value', clip_value=0.5)],
                         ids=['no-clip', 'clip-by-value'])
def test_a_step_without_a_norm_clip_keeps_its_gradients_norm(clip_grad):
    """Where no clip by norm computes it, the step still keeps the gradients' total norm (after
    a clip by value, the one it applies), which the loop checks; logged as ``grad_norm`` where
    it is the gradients' own."""
    weight = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    wrapper = OptimWrapper(torch.optim.SGD([weight], lr=0.1), clip_grad=clip_grad)
    wrapper.message_hub = MessageHub.get_instance(f'test_norm_without_clip_{clip_grad}')
    weight.grad = torch.tensor([3.0, 0.0, -4.0])
    wrapper.step()
    applied = torch.tensor([3.0, 0.0, -4.0]).clamp(-0.5, 0.5) if clip_grad else torch.tensor(
        [3.0, 0.0, -4.0])
    assert wrapper.pending_norm.item() == pytest.approx(applied.norm().item())
    wrapper.log_pending_norm()
    logged = wrapper.message_hub.log_scalars.get('train/grad_norm')
    assert (logged.current() if logged else None) == (None if clip_grad else pytest.approx(5.0))


def test_gradients_accumulate_over_the_configured_count():
    """``accumulative_counts=2``: the first call steps nothing, the second steps once on the
    mean of the two losses' gradients."""
    weight = torch.nn.Parameter(torch.zeros(1))
    wrapper = OptimWrapper(torch.optim.SGD([weight], lr=1.0), accumulative_counts=2)
    wrapper.initialize_count_status(torch.nn.Linear(1, 1), 0, 4)
    wrapper.update_params((weight * 2.0).sum())
    assert weight.item() == 0.0
    wrapper.update_params((weight * 4.0).sum())
    assert weight.item() == pytest.approx(-(2.0 + 4.0) / 2)


def test_a_step_given_a_closure_runs_it_eagerly_beside_a_compiled_step():
    weight = torch.nn.Parameter(torch.ones(2))
    wrapper = OptimWrapper(torch.optim.SGD([weight], lr=0.5),
                           compiled_step=dict(backend='eager'))
    calls = []

    def closure() -> torch.Tensor:
        calls.append(1)
        return torch.tensor(0.0)

    weight.grad = torch.tensor([1.0, 2.0])
    wrapper.step(closure=closure)
    assert calls == [1]
    assert weight.detach().tolist() == [0.5, 0.0]


def test_the_clip_ignores_the_stale_gradients_of_frozen_parameters():
    trained, frozen = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    wrapper = OptimWrapper(torch.optim.SGD([trained, frozen], lr=1.0),
                           clip_grad=dict(max_norm=100.0))
    trained.grad, frozen.grad = torch.tensor([3.0, 4.0]), torch.tensor([100.0, 100.0])
    frozen.requires_grad_(False)
    wrapper.step()
    assert float(wrapper.pending_norm) == pytest.approx(5.0)


def test_an_unfused_step_logs_its_non_finite_norm_and_says_no_skip(monkeypatch):
    from xmr.engine import optim_wrapper as module

    said = []
    monkeypatch.setattr(module, 'print_log', lambda message, **_: said.append(message))
    _, _, unfused = adamw_after([torch.tensor([math.nan, 0.0, 0.0])], foreach=False)
    unfused.message_hub = MessageHub.get_instance('test_unfused_nonfinite_norm')
    unfused.log_pending_norm()
    assert said == []
    assert math.isnan(unfused.message_hub.get_scalar('train/grad_norm').current())


def test_the_compiled_step_keeps_float_rates_in_the_groups():
    """The rates are tensors only inside the compiled call: schedulers, logs and the state
    dict read floats."""
    _, _, _, wrapper = clipped_adamw_steps(dict(foreach=True, capturable=True),
                                           dict(backend='eager'))
    assert all(type(group['lr']) is float for group in wrapper.optimizer.param_groups)


def test_compile_options_beside_a_model_compiled_in_a_mode():
    from xmr.engine.optim_wrapper import wrapper_compile_options

    assert wrapper_compile_options('compiled_step', 'reduce-overhead') == dict(mode='default')
    assert wrapper_compile_options('compiled_step', 'max-autotune') == dict(
        mode='max-autotune-no-cudagraphs')
    assert wrapper_compile_options('compiled_step', 'default') == dict(mode='default')
    assert wrapper_compile_options('compiled_autograd', 'reduce-overhead') == dict(
        mode='reduce-overhead')


def test_an_optimiser_without_a_capturable_option_may_be_compiled():
    OptimWrapper(torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1.0),
                 compiled_step=dict())


def test_a_fused_step_clipping_by_value_skips_nothing_and_says_so():
    """Clipping by value computes no norm to hand the fused kernel as ``found_inf``: the loop's
    ``nonfinite_patience`` must not count on a skip that does not happen."""
    weight = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    wrapper = OptimWrapper(torch.optim.AdamW([weight], lr=0.1, fused=True),
                           clip_grad=dict(type='value', clip_value=1.0))
    assert not wrapper.skips_nonfinite_steps
    weight.grad = torch.tensor([math.nan, 0.0, 0.0])
    wrapper.step()
    assert torch.isnan(weight.detach()[0])  # clipping by value leaves NaN as it is


def test_a_step_without_gradients_keeps_no_norm_to_log():
    """Nothing was clipped: a norm of 0 in the log would be no gradient's."""
    weight = torch.nn.Parameter(torch.zeros(2))
    wrapper = OptimWrapper(torch.optim.SGD([weight], lr=1.0), clip_grad=dict(max_norm=1.0))
    wrapper.step()
    assert wrapper.pending_norm is None


def test_a_window_saved_by_other_ranks_continues_from_their_mean_gradient():
    """Two ranks' window (a parameter without gradient on rank 0) resumed by one process: its
    gradient is what DDP's average would have brought into the step, (g_0 + g_1) / 2."""
    saved = [[torch.tensor([1.0, 2.0]), None, None],
             [torch.tensor([3.0, 6.0]), torch.tensor([4.0]), None]]
    mean = window_grads_for_this_rank(saved)
    assert mean[0].tolist() == [2.0, 4.0] and mean[1].tolist() == [2.0] and mean[2] is None
    wrapper = OptimWrapper(torch.optim.SGD([torch.nn.Parameter(torch.zeros(2)),
                                            torch.nn.Parameter(torch.zeros(1)),
                                            torch.nn.Parameter(torch.zeros(3))], lr=1.0))
    state = wrapper.state_dict()
    wrapper.load_state_dict(dict(state, pending_grads=saved))
    assert [None if p.grad is None else p.grad.tolist() for p in wrapper._parameters()] == [
        [2.0, 4.0], [2.0], None]
    # An earlier xmr's checkpoint: one rank's list, its own.
    wrapper.load_state_dict(dict(state, pending_grads=saved[1]))
    assert wrapper._parameters()[1].grad.tolist() == [4.0]


@pytest.mark.parametrize('clip_grad', [dict(max_norm=-1.0), dict(max_norm=0),
                                       dict(type='value', clip_value=-0.5),
                                       dict(max_norm='1'),
                                       # a flag read as 1: clip_grad=True meant 'clip', at what?
                                       dict(max_norm=True)])
def test_a_clip_threshold_that_is_no_positive_number_is_refused(clip_grad):
    """max_norm=-1 (the authors' "no clip") turned every step uphill; 0 zeroed the gradients."""
    key = 'clip_value' if 'clip_value' in clip_grad else 'max_norm'
    with pytest.raises(ValueError, match=f'^optim_wrapper.clip_grad.{key}='
                                         f'{clip_grad[key]!r} must be a positive number; give '
                                         'clip_grad=None to train without clipping$'):
        OptimWrapper(optimizer=torch.optim.SGD([torch.zeros(1)], lr=1), clip_grad=clip_grad)



def test_an_fp16_loss_scale_a_run_without_it_cannot_use_is_dropped_with_a_warning(monkeypatch):
    said = []
    monkeypatch.setattr('xmr.engine.optim_wrapper.print_log',
                        lambda message, **kwargs: said.append((message, kwargs['level'])))
    weight = torch.nn.Parameter(torch.zeros(2))
    wrapper = OptimWrapper(torch.optim.SGD([weight], lr=0.5))
    wrapper.load_state_dict(dict(wrapper.state_dict(), loss_scaler=dict(scale=1024.0)))
    assert wrapper.optimizer.param_groups[0]['lr'] == 0.5
    assert said == [('the checkpoint was written under fp16 loss scaling, which this run does '
                     'not use; its loss scale is dropped (resume with --amp-dtype float16 to '
                     'keep training as it did)', logging.WARNING)]
    wrapper.load_state_dict(wrapper.state_dict())
    assert len(said) == 1


@pytest.mark.parametrize('wrapper_type', [OptimWrapper, AutocastOptimWrapper])
def test_a_loaded_state_keeps_the_config_s_settings_and_names_those_it_held_otherwise(
        wrapper_type):
    """torch's load replaced each group's settings with the checkpoint's: a resume under a new
    weight decay decayed at the old one. The state (Adam's moments) is the checkpoint's; a
    list of the same betas is no change."""
    def built(weight_decay, betas):
        weight = torch.nn.Parameter(torch.ones(3))
        return weight, wrapper_type(optimizer=torch.optim.AdamW(
            [dict(params=[weight], name='adapters')], lr=0.1, weight_decay=weight_decay,
            betas=betas))

    weight, saved = built(0.1, (0.9, 0.98))
    weight.grad = torch.tensor([1.0, -2.0, 3.0])
    saved.step()
    state = saved.state_dict()
    for config, changes in ((dict(weight_decay=0.5, betas=[0.9, 0.98]), (
            "group 'adapters': weight_decay=0.1 in the checkpoint, 0.5 in the config",)),
                            (dict(weight_decay=0.1, betas=[0.9, 0.98]), ())):
        _, loading = built(**config)
        loading.load_state_dict(dict(state))
        group = loading.optimizer.param_groups[0]
        assert (group['weight_decay'], list(group['betas'])) == (config['weight_decay'],
                                                                [0.9, 0.98])
        assert loading.resumed_setting_changes == changes
        moments = next(iter(loading.optimizer.state.values()))['exp_avg']
        assert torch.equal(moments, next(iter(saved.optimizer.state.values()))['exp_avg'])


def test_a_loaded_state_compares_settings_by_value_and_length_and_leaves_the_rate_alone():
    """An optimiser that keeps a group's list as given (SGD here, with a ``betas`` entry) may
    hold the config's list beside the checkpoint's tuple of the same numbers: no change. A
    tuple of other length is one. The rate is the loop's to set at every iteration, not a
    setting: the checkpoint's scheduled rate stays and is no change."""
    def built(betas):
        weight = torch.nn.Parameter(torch.ones(2))
        return OptimWrapper(optimizer=torch.optim.SGD(
            [dict(params=[weight], name='adapters', betas=betas)], lr=0.1))

    saved = built((0.9, 0.98))
    saved.optimizer.param_groups[0]['lr'] = 0.025  # a scheduled rate at the save
    state = saved.state_dict()
    same = built([0.9, 0.98])
    same.load_state_dict(dict(state))
    assert same.resumed_setting_changes == ()
    assert same.optimizer.param_groups[0]['betas'] == [0.9, 0.98]
    assert same.optimizer.param_groups[0]['lr'] == 0.025
    shorter = built((0.9,))
    shorter.load_state_dict(dict(state))
    assert shorter.resumed_setting_changes == (
        "group 'adapters': betas=(0.9, 0.98) in the checkpoint, (0.9,) in the config",)
