"""Training steps on the accelerator: fused AdamW, AMP with and without a loss scaler, and the
feature cache, each against the CPU or the unfused implementation."""
from __future__ import annotations

import copy
import inspect
import math
import sys

import pytest
import torch

from tests.configs.test_dasd_configs import batch as dasd_batch
from tests.conftest import REPO, tiny_retriever_cfg
from tests.engine.test_amp import BATCH, TOLERANCE, target_embeddings, wrapper_for
from tests.engine.test_feature_cache import ListDataset, pair_items
from tests.engine.test_optim import TinyBranch, build, train_step
from tests.gpu.conftest import FP32_TOLERANCE
from tests.models.retrievers.test_compiled_losses import dasd, losses_and_grads
from xmr.engine.feature_cache import CachedFeatureDataset
from xmr.engine.frozen_casts import FrozenWeightCasts
from xmr.engine.optim import PhasedOptimWrapperConstructor
from xmr.registry import MODELS

pytestmark = pytest.mark.gpu


def retriever(device: torch.device, phase: str = 'cross_lingual', weights=None):
    torch.manual_seed(0)
    model = MODELS.build(tiny_retriever_cfg()).to(device)
    model.set_phase(phase, weights or dict(cl=1.0))
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith('language_branch.'))
    return model


def trained_branch(model, wrapper, steps: int = 3) -> dict[str, torch.Tensor]:
    for _ in range(steps):
        model.train_step(BATCH, wrapper)
    return {name: p.detach().cpu() for name, p in model.named_parameters() if p.requires_grad}


def test_fused_adamw_equals_the_per_tensor_loop(accelerator):
    fused_model, loop_model = retriever(accelerator), retriever(accelerator)
    fused = wrapper_for(fused_model, 'OptimWrapper')
    assert fused.optimizer.defaults['fused'] is True  # the constructor's default on a device
    loop = wrapper_for(loop_model, 'OptimWrapper')
    loop.optimizer = torch.optim.AdamW(loop.optimizer.param_groups, foreach=False, fused=False)
    expected = trained_branch(loop_model, loop)
    got = trained_branch(fused_model, fused)
    assert any(not torch.equal(v, p.detach().cpu()) for v, p in zip(
        got.values(), retriever(torch.device('cpu')).parameters()))
    for name, value in got.items():
        torch.testing.assert_close(value, expected[name], **FP32_TOLERANCE, msg=name)


def test_bert_adam_on_the_accelerator_equals_the_cpu_per_tensor_update_unwaited(accelerator):
    """The authors' optimiser (``--ablation dasd/authors-optimizer``): its multi-tensor update
    on the device equals the reference's one-tensor-at-a-time update on the CPU, and its clip
    per tensor never reads a norm on the host."""
    bert_adam = dict(type='BertAdam', lr=1e-3, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2,
                     max_grad_norm=1.0)
    cpu_model, model = retriever(torch.device('cpu')), retriever(accelerator)
    expected = trained_branch(cpu_model, PhasedOptimWrapperConstructor(dict(
        type='OptimWrapper', optimizer=dict(bert_adam, foreach=False)))(cpu_model))
    wrapper = PhasedOptimWrapperConstructor(dict(type='OptimWrapper', optimizer=bert_adam))(model)
    for name, value in trained_branch(model, wrapper).items():
        torch.testing.assert_close(value, expected[name], **FP32_TOLERANCE, msg=name)

    losses = model(mode='loss', **model.data_preprocessor(BATCH, True))
    sum(losses.values()).backward()
    before = [p.detach().clone() for p in model.parameters() if p.grad is not None]
    if accelerator.type == 'cuda':
        torch.cuda.synchronize(accelerator)
        torch.cuda.set_sync_debug_mode('error')
    try:
        wrapper.optimizer.step()
    finally:
        if accelerator.type == 'cuda':
            torch.cuda.set_sync_debug_mode(0)
    after = [p.detach() for p in model.parameters() if p.grad is not None]
    assert before and any(not torch.equal(b, a) for b, a in zip(before, after))


@pytest.mark.parametrize('implementation', ['fused', 'foreach'])
def test_adamw_updates_a_column_major_weight_as_a_row_major_one(accelerator, implementation):
    """DynamicAdapter's W_up is held column-major (its gradient's layout): the multi-tensor
    kernels must read its strides, not assume row-major ones."""
    generator = torch.Generator().manual_seed(0)
    values, grads = torch.randn(2, 48, 32, generator=generator).to(accelerator)
    row = torch.nn.Parameter(values.clone())
    column = torch.nn.Parameter(values.t().contiguous().t())
    optimisers = [torch.optim.AdamW([p], lr=1e-2, **{implementation: True})
                  for p in (row, column)]
    for _ in range(3):
        row.grad, column.grad = grads.clone(), grads.t().contiguous().t()
        for optimiser in optimisers:
            optimiser.step()
    assert column.stride() == (1, 48)
    torch.testing.assert_close(column, row, rtol=0, atol=0)


def test_a_clipped_step_with_a_sparse_table_equals_the_cpu(accelerator):
    """SparseAdam beside AdamW with norm clipping: CUDA has no sparse norm kernel, so clipping
    must measure the coalesced values itself."""
    trained = {}
    for device in (torch.device('cpu'), accelerator):
        model = TinyBranch(sparse=True).to(device)
        wrapper = build(model, clip_grad=dict(max_norm=1e-2))
        for ids in ([1, 2, 2], [2, 7, 9]):
            train_step(model, wrapper, ids)
        trained[device.type] = [p.detach().cpu() for p in model.parameters()]
    for got, expected in zip(trained[accelerator.type], trained['cpu'], strict=True):
        torch.testing.assert_close(got, expected, **FP32_TOLERANCE)


@pytest.mark.parametrize('dtype, phase, weights', [
    ('bfloat16', 'cross_lingual', dict(cl=1.0)),
    ('bfloat16', 'cross_modal', dict(cm=1.0)),
    ('float16', 'cross_lingual', dict(cl=1.0)),
    ('float16', 'cross_modal', dict(cm=1.0)),
])
def test_amp_steps_stay_within_the_documented_tolerance_of_fp32(accelerator, dtype, phase,
                                                                weights):
    """The tolerance of tests/engine/test_amp.py (docs/benchmarks.md), on the accelerator."""
    reference = retriever(accelerator, phase, weights)
    mixed = copy.deepcopy(reference)
    untrained = target_embeddings(copy.deepcopy(reference))
    fp32 = wrapper_for(reference, 'OptimWrapper')
    amp = wrapper_for(mixed, 'AutocastOptimWrapper', dtype=dtype,
                      loss_scale=dict(init_scale=1024.0))
    for _ in range(2):
        expected_loss = reference.train_step(BATCH, fp32)['loss']
        torch.testing.assert_close(mixed.train_step(BATCH, amp)['loss'], expected_loss,
                                   rtol=2e-2, atol=0)
    assert (amp.scaler is None) == (dtype == 'bfloat16')
    expected, got = target_embeddings(reference), target_embeddings(mixed)
    change = ((expected - untrained).norm(dim=-1) / expected.norm(dim=-1)).min()
    error = ((got - expected).norm(dim=-1) / expected.norm(dim=-1)).max()
    assert error <= TOLERANCE < change


def test_fp16_overflow_skips_the_step_and_halves_the_scale(accelerator):
    model = retriever(accelerator)
    wrapper = wrapper_for(model, 'AutocastOptimWrapper', dtype='float16',
                          loss_scale=dict(init_scale=1024.0))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with wrapper.optim_context(model):
        data = model.data_preprocessor(BATCH, True)
        loss = model(mode='loss', **data)['loss_cl']
    wrapper.backward(loss * float('inf'))
    wrapper.step()
    wrapper.zero_grad()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert wrapper.scaler.get_scale() == 512.0
    model.train_step(BATCH, wrapper)  # the next, finite step updates again
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_frozen_weight_casts_follow_a_model_moved_onto_the_accelerator(accelerator):
    """``model.to(device)`` moves each parameter's data and keeps the Parameter object and its
    version counter: a copy cast on the CPU before the move must not be swapped in after it."""
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 4).requires_grad_(False)
    x = torch.randn(3, 6)
    casts = FrozenWeightCasts()
    with torch.autocast('cpu', dtype=torch.bfloat16), casts.swapped_into(model):
        model(x)
    model.to(accelerator)
    x = x.to(accelerator)
    with torch.autocast(accelerator.type, dtype=torch.bfloat16):
        expected = model(x)
        with casts.swapped_into(model):
            got = model(x)
    assert got.device == expected.device and torch.equal(got, expected)


def test_a_feature_cache_built_on_the_accelerator_equals_one_built_on_the_cpu(accelerator,
                                                                               tmp_path):
    dataset = ListDataset(pair_items())
    caches = {}
    for device in (torch.device('cpu'), accelerator):
        cache = CachedFeatureDataset(dataset, tmp_path / device.type / 'cache')
        cache.prepare(retriever(device, 'cross_modal', dict(cm=1.0)))
        caches[device.type] = [cache[i] for i in range(len(cache))]
    for got, expected in zip(caches[accelerator.type], caches['cpu'], strict=True):
        for key in ('source_features', 'media_features'):
            torch.testing.assert_close(torch.as_tensor(got[key]), torch.as_tensor(expected[key]),
                                       **FP32_TOLERANCE)


# The paper's configs give each language its own SDM; the authors' released code shares one.
@pytest.mark.parametrize('per_language', [True, False], ids=['per-language', 'shared'])
def test_a_dasd_training_step_never_waits_for_the_gpu(accelerator, per_language):
    """DASD's whole cross-lingual loss (SDM, generator, discriminator with its shuffled
    negatives, grouped dynamic adapters, L_CL) forward and backward, on a mixed-language batch:
    any host sync inside raises on CUDA, where it would stall the launches of the step."""
    model = dasd(per_language=per_language).to(accelerator)
    data = model.data_preprocessor(dasd_batch(model.languages), True)
    trained = [p for p in model.parameters() if p.requires_grad]
    if accelerator.type == 'cuda':
        torch.cuda.synchronize(accelerator)
        torch.cuda.set_sync_debug_mode('error')
    try:
        losses = model(mode='loss', **data)
        grads = torch.autograd.grad(sum(losses.values()), trained, allow_unused=True)
    finally:
        if accelerator.type == 'cuda':
            torch.cuda.set_sync_debug_mode(0)
    assert set(losses) >= {'loss_cl', 'loss_adv', 'loss_sc'}
    assert all(torch.isfinite(loss).item() for loss in losses.values())
    assert any(g is not None and g.abs().sum().item() > 0 for g in grads)


@pytest.mark.parametrize('per_language', [False, True], ids=['shared', 'per-language'])
def test_a_dasd_step_replayed_as_cuda_graphs_equals_eager(accelerator, per_language):
    """``compile=dict(mode='reduce-overhead')``: Inductor's kernels, replayed as CUDA graphs on
    a GPU, give eager's losses and gradients; a second mix of the languages replays them. The
    paper's per-language SDMs run eagerly between four compiled parts."""
    import torch._inductor.config

    eager = dasd(per_language=per_language).to(accelerator)
    compiled = dasd(dict(mode='reduce-overhead'), per_language).to(accelerator)
    compiled.load_state_dict(eager.state_dict())
    de, fr, cs = eager.languages
    # Eager's random draws: the shuffled negatives of both runs are the same. (The config's own
    # patch: monkeypatch would delete the option on undo, which it finds in no __dict__.)
    with torch._inductor.config.patch(fallback_random=True):
        for langs in ([de, fr, cs, de], [cs, de, fr, fr]):
            want = [t.cpu() for t in losses_and_grads(eager, langs)]
            got = [t.cpu() for t in losses_and_grads(compiled, langs)]
            for mine, expected in zip(got, want, strict=True):
                torch.testing.assert_close(mine, expected, **FP32_TOLERANCE)


def test_a_dasd_backward_traced_whole_as_cuda_graphs_trains_as_autograd_s_engine(accelerator):
    """``optim_wrapper.compiled_autograd=dict(mode='reduce-overhead')`` beside the model's own
    ``compile``: the backward, each gradient's accumulation into its parameter included, traced
    and replayed as a CUDA graph, trains three steps as autograd's engine does, and the third
    step traces nothing. (On the CPU it is traced at the first step only; on an H200, torch 2.11,
    twice in the three steps, in which two the test did not yet say.)"""
    import torch._inductor.config

    from tests.engine.test_optim_wrapper import THREE_STEPS_LR, three_dasd_steps

    graphs = dict(mode='reduce-overhead')
    with torch._inductor.config.patch(fallback_random=True):
        engine_losses, engine_weights, _ = three_dasd_steps(graphs, None, accelerator)
        losses, weights, captures = three_dasd_steps(graphs, graphs, accelerator)
    torch.testing.assert_close(losses, engine_losses, **FP32_TOLERANCE)
    # Adam divides each gradient by its own running size, so the reductions' order, which
    # differs between the two backwards' kernels, moves an element whose gradients nearly cancel
    # by a share of a whole step: on an H200 (2026-11-30) 6.7e-5, 0.7% of the lr, for 1 element
    # of 1024. A gradient lost or overwritten would move many by about the lr itself.
    for mine, reference in zip(weights, engine_weights, strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-4, atol=THREE_STEPS_LR / 50)
    assert captures[0] >= 1 and captures[2] == captures[1], f'traced after each step: {captures}'


@pytest.mark.parametrize('amp', [{}, dict(dtype='bfloat16')], ids=['fp32', 'bf16-autocast'])
def test_a_compiled_step_updates_as_fused_adamw_unwaited(accelerator, amp):
    """``optim_wrapper.compiled_step=dict()``: the clip and foreach AdamW compiled by Inductor
    (Triton's kernels on CUDA), each lr a device tensor, update as eager fused AdamW over three
    steps with three lrs, compile nothing for a new lr, and a fourth step never waits for the
    device; the same through ``--amp``'s wrapper in bf16."""
    from tests.engine.test_optim_wrapper import clipped_adamw_step, clipped_adamw_steps

    reference, reference_norms, _, _ = clipped_adamw_steps(dict(fused=True), None, accelerator)
    trained, norms, graphs, wrapper = clipped_adamw_steps(
        dict(foreach=True, capturable=True), dict(), accelerator, **amp)
    assert norms == pytest.approx(reference_norms, rel=1e-5)
    for mine, expected in zip(trained, reference, strict=True):
        torch.testing.assert_close(mine, expected, **FP32_TOLERANCE)
    assert graphs[2] == graphs[1]
    if accelerator.type == 'cuda':
        torch.cuda.synchronize(accelerator)
        torch.cuda.set_sync_debug_mode('error')
    try:
        clipped_adamw_step(wrapper, 3)
    finally:
        if accelerator.type == 'cuda':
            torch.cuda.set_sync_debug_mode(0)
    assert float(wrapper.pending_norm) > 0


def test_a_fused_step_with_non_finite_gradients_updates_nothing_on_the_device(accelerator):
    """torch's fused CUDA AdamW takes xmr's wrapper's ``found_inf`` flag: a NaN or inf
    gradient's step leaves the weight, the moments and the step count as they were."""
    from tests.engine.test_optim_wrapper import (
        assert_a_fused_step_with_non_finite_gradients_updates_nothing,
    )

    for bad in (math.nan, math.inf):
        assert_a_fused_step_with_non_finite_gradients_updates_nothing(bad, accelerator)


def test_an_evaluation_replayed_as_cuda_graphs_equals_eager(accelerator):
    """The compiled encoding of captions, one language a batch as the evaluation loops run it,
    on CUDA graphs: eager's embeddings for English and every target language, batches of two
    sizes."""
    eager = dasd().to(accelerator).eval()
    compiled = dasd(dict(mode='reduce-overhead')).to(accelerator).eval()
    compiled.load_state_dict(eager.state_dict())

    def embeddings(model, texts: list[str], lang: str) -> torch.Tensor:
        tokens, _ = model.data_preprocessor.caption_tokens([{lang: texts}])[lang]
        tokens = {key: value.to(accelerator) for key, value in tokens.items()}
        with torch.no_grad():
            return model.encode_text(tokens, lang).cpu()

    captions = ['ein roter Kreis', 'un carré bleu', 'zwei rote Kreise', '一个十字']
    for lang in (compiled.source_language, *compiled.languages):
        for texts in (captions, captions[:3], captions):
            torch.testing.assert_close(embeddings(compiled, texts, lang),
                                       embeddings(eager, texts, lang), **FP32_TOLERANCE)


def test_a_training_step_never_waits_and_a_planted_wait_is_named(accelerator):
    """``tools/benchmark.py``'s unwaited window: the retriever's whole training step
    (preprocess, forward, backward, clip, fused AdamW; xmr's wrapper keeps the clipped norm on
    the device) queued back to back names no wait; a ``.item()`` in the step is named by its
    line."""
    sys.path.insert(0, str(REPO / 'tools'))
    import benchmark

    model = retriever(accelerator)
    wrapper = wrapper_for(model, 'OptimWrapper')

    def planted(batch):
        model.train_step(batch, wrapper)
        return next(model.parameters()).sum().item()  # the planted wait

    clean = benchmark.unwaited_steps(lambda batch: model.train_step(batch, wrapper),
                                     [BATCH, BATCH], accelerator)
    waited = benchmark.unwaited_steps(planted, [BATCH], accelerator)
    assert clean['waits'] == [] and clean['unwaited_ms'] > 0
    line = planted.__code__.co_firstlineno + 2
    assert waited['waits'] == ([f'test_training.py:{line}'] if accelerator.type == 'cuda'
                               else [])


def test_an_evaluation_batch_waits_for_the_device_once(accelerator):
    """A gallery batch (images, English and German captions) is encoded and copied to the host
    at once (``gallery_batch``): its one wait is that copy, not one per tensor."""
    sys.path.insert(0, str(REPO / 'tools'))
    import benchmark

    from xmr.models.retrievers import base

    model = retriever(accelerator).eval()
    gallery = dict(media=torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8,
                                       generator=torch.Generator().manual_seed(0)),
                   captions=[{'en': ['a red circle'], 'de': ['ein roter Kreis', 'ein Kreis']},
                             {'en': ['a blue square'], 'de': ['ein blaues Quadrat']}],
                   media_id=['a', 'b'], index=[0, 1])
    waits = benchmark.unwaited_steps(model.val_step, [gallery], accelerator)['waits']
    source, first = inspect.getsourcelines(base.gallery_batch)
    copy_line = first + next(i for i, line in enumerate(source) if '.cpu()' in line)
    assert waits == ([f'base.py:{copy_line}'] if accelerator.type == 'cuda' else [])
