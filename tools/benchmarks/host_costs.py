"""The host's costs of a training step that grow with its trained tensors and its modules.

On a GPU the compiled DASD step is bound by the host (docs/benchmarks.md, "A compiled step"),
and part of the host's work is paid once per trained tensor (240 at ViT-B/32: autograd's
``AccumulateGrad`` after the backward, the clip's and the optimiser's bookkeeping) or once per
module (``model.train()``). This script measures those costs apart from the step, for DASD's
model as ``tools/benchmark.py`` builds it (random weights, the paper's table)::

    python tools/benchmarks/host_costs.py                       # ViT-B/32 on the CPU
    python tools/benchmarks/host_costs.py --device cuda         # the GPU's host

It prints the median time of each call over ``--reps`` repetitions, the device idle at each
start; on a GPU a call returns once its kernels are queued, so its time is the host's:

- training mode: ``model.train()`` against the flags' check of
  :func:`xmr.engine.loops.ensure_train_mode` (every module already in training mode);
- the optimiser's part of a step (the clip of xmr's ``OptimWrapper``, fused AdamW as xmr's
  constructor builds it, ``zero_grad``) over the trained tensors but the embedding table (one
  tensor either way), against the same over one tensor of their total size; at their own
  shapes, and shrunk to at most 4 per dimension, where what is left is the cost per tensor;
- the backward into as many leaf tensors, shrunk, against one leaf of their total size;
- with ``--compile [MODE]``, the clip and the AdamW step compiled together by xmr's
  ``OptimWrapper(compiled_step=...)`` in that mode without CUDA graphs (foreach AdamW, as
  compiled optimisers are traced, each group's lr a device tensor the wrapper fills) over the
  tensors at their own shapes, a new float lr set before each call as the loop sets it; the
  compiling (minutes on a CPU) is not timed, and the graphs compiled during the timed calls
  are counted (none: their lrs change nothing of the graph); and the backward into as many
  leaves after a forward compiled in the same mode, by autograd's engine (one
  ``AccumulateGrad`` per leaf, as in xmr's compiled step) and traced by compiled autograd
  (the accumulation compiled with the rest of the backward).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch._inductor
from torch import nn

from xmr.utils.cli import UserError, given_device, int_at_least, run_tool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmark  # noqa: E402  (tools/benchmark.py: the model of its rows)

#: The largest size of a dimension of a shrunk tensor.
SHRUNK = 4


def host_ms(call: Callable[[], object], reps: int, device: torch.device,
            before: Callable[[], object] | None = None) -> float:
    """Median time of ``call`` in ms over ``reps`` runs, each after ``before`` (untimed) and
    with the device idle."""
    times = []
    for _ in range(reps):
        if before is not None:
            before()
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    return 1000 * statistics.median(times)


def dasd_model(arch: str, device: torch.device) -> nn.Module:
    """DASD's retriever of ``tools/benchmark.py``, in its cross-lingual phase's trained state."""
    from xmr.registry import MODELS, TOKENIZERS

    with tempfile.TemporaryDirectory() as work_dir:  # the tokenizer is read as it is built
        cfg = benchmark.model_cfg(arch, None, False, f'{work_dir}/target_sp.model', 'dasd')
        TOKENIZERS.build(cfg['language_branch']['tokenizer'])
        model = MODELS.build(cfg).to(device)
    benchmark.train_target_only(model)
    return model


def optimiser_part(shapes: Sequence[torch.Size], reps: int, device: torch.device,
                   compile_mode: str | None = None) -> dict[str, float]:
    """ms of the clip, the AdamW step and ``zero_grad`` over fresh tensors of ``shapes`` with
    random gradients (``compile_mode``: clip and step as one call compiled in that
    ``torch.compile`` mode, as ``step``)."""
    from xmr.engine.optim import fused_by_default, traceable_by_default
    from xmr.engine.optim_wrapper import OptimWrapper, wrapper_compile_options

    parameters = [nn.Parameter(torch.randn(shape, device=device) * 0.02) for shape in shapes]
    settings = dict(type='AdamW', lr=1e-5, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2)
    settings = (traceable_by_default(settings) if compile_mode
                else fused_by_default(settings, parameters))
    settings.pop('type')
    optimizer = torch.optim.AdamW(parameters, **settings)
    grads = [torch.randn_like(p) * 1e-3 for p in parameters]

    def set_grads() -> None:
        for parameter, grad in zip(parameters, grads):
            parameter.grad = grad.clone()

    wrapper = OptimWrapper(optimizer, clip_grad=dict(max_norm=1.0), compiled_step=(
        wrapper_compile_options('compiled_step', compile_mode) if compile_mode else None))
    if compile_mode:
        from torch._dynamo.utils import counters

        lrs = iter(torch.linspace(1e-5, 1e-6, reps + 3).tolist())

        def next_iteration() -> None:
            set_grads()
            optimizer.param_groups[0]['lr'] = next(lrs)  # a float, as the loop sets it

        for _ in range(3):  # compiles (the first step, which makes the state, and the next)
            next_iteration()
            wrapper.step()
        settled = counters['stats']['unique_graphs']
        return dict(step=host_ms(wrapper.step, reps, device, next_iteration),
                    new_graphs=counters['stats']['unique_graphs'] - settled)
    set_grads()
    optimizer.step()  # the state exists from here on, as after a run's first step
    return dict(clip=host_ms(wrapper._clip_grad, reps, device, set_grads),
                step=host_ms(optimizer.step, reps, device, set_grads),
                zero_grad=host_ms(optimizer.zero_grad, reps, device, set_grads))


def backward_ms(leaves: int, numel: int, reps: int, device: torch.device,
                compile_mode: str | None = None, compiled_autograd: bool = False) -> float:
    """ms of a backward into ``leaves`` leaf tensors of ``numel`` elements in all.

    ``compile_mode``: the forward compiled in that ``torch.compile`` mode, so that the backward
    is its compiled graph followed by autograd's accumulation into each leaf, as in a compiled
    step; with ``compiled_autograd``, the whole backward, accumulation included, is traced by
    compiled autograd and compiled in that mode too.
    """
    from xmr.engine.optim_wrapper import OptimWrapper, wrapper_compile_options

    sizes = [numel // leaves + (i < numel % leaves) for i in range(leaves)]
    parameters = [nn.Parameter(torch.zeros(size, device=device)) for size in sizes]
    loss = []

    def total() -> torch.Tensor:
        return torch.cat(parameters).sum()

    if compile_mode:
        total = torch.compile(total, mode=compile_mode)

    def forward() -> None:
        for parameter in parameters:
            parameter.grad = None
        loss[:] = [total()]

    # The backward as a step runs it, through xmr's wrapper (traced whole with compiled_autograd).
    wrapper = OptimWrapper(torch.optim.SGD(parameters, lr=0.0), compiled_autograd=(
        wrapper_compile_options('compiled_autograd', compile_mode) if compiled_autograd
        else None))

    def backward() -> None:
        wrapper.backward(loss[0])

    for _ in range(3):  # compiles, then settles
        forward()
        backward()
    return host_ms(backward, reps, device, forward)


def shrunk(shape: torch.Size) -> torch.Size:
    return torch.Size(min(size, SHRUNK) for size in shape)


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--arch', default='ViT-B-32', help="as tools/benchmark.py ('tiny')")
    parser.add_argument('--device', default='cpu', help="'cpu', 'cuda' or 'cuda:N'")
    parser.add_argument('--reps', type=int_at_least(1), default=20,
                        help='repetitions of each call; the median is printed')
    parser.add_argument('--threads', type=int_at_least(1), help='torch CPU threads')
    # torch.compile's modes, taken here: a mistyped one failed once the eager figures were in.
    parser.add_argument('--compile', nargs='?', const='default', metavar='MODE',
                        choices=list(torch._inductor.list_mode_options()),
                        help="also time the clip and the step compiled together, as "
                             "optim_wrapper.compiled_step beside a model compiled in this mode "
                             "('default'; 'reduce-overhead' compiles the step in 'default', "
                             'without CUDA graphs), and the backward in it')
    args = parser.parse_args(argv)
    try:
        given_device(args.device)  # the model is built before it moves there
    except UserError as error:
        parser.error(str(error))
    if args.threads:
        torch.set_num_threads(args.threads)
    from xmr.engine.loops import ensure_train_mode
    from xmr.engine.optim_wrapper import wrapper_compile_options

    device = torch.device(args.device)
    model = dasd_model(args.arch, device)
    modules = ensure_train_mode(model, None)
    table = model.language_branch.embedding.table.weight
    shapes = [p.shape for p in model.parameters() if p.requires_grad and p is not table]
    full = [torch.Size([sum(shape.numel() for shape in shapes)])]
    small = [shrunk(shape) for shape in shapes]
    one_small = [torch.Size([sum(shape.numel() for shape in small)])]
    results: dict[str, object] = dict(
        modules=len(modules), tensors=len(shapes), elements=full[0][0],
        train_ms=host_ms(model.train, args.reps, device),
        check_ms=host_ms(lambda: ensure_train_mode(model, modules), args.reps, device),
        own_shapes=optimiser_part(shapes, args.reps, device),
        one_tensor=optimiser_part(full, args.reps, device),
        shrunk=optimiser_part(small, args.reps, device),
        one_shrunk=optimiser_part(one_small, args.reps, device),
        backward_leaves=backward_ms(len(shapes), one_small[0][0], args.reps, device),
        backward_one=backward_ms(1, one_small[0][0], args.reps, device))
    if args.compile:
        results['compiled'] = optimiser_part(shapes, args.reps, device, args.compile)
        results['backward_compiled'] = backward_ms(len(shapes), one_small[0][0], args.reps,
                                                   device, args.compile)
        results['backward_compiled_autograd'] = backward_ms(
            len(shapes), one_small[0][0], args.reps, device, args.compile, compiled_autograd=True)
    name = torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'
    print(f'{args.arch}, DASD, {name} (torch {torch.__version__}, {torch.get_num_threads()} '
          f'threads), median of {args.reps}\n')
    print(f"training mode, {results['modules']} modules: model.train() "
          f"{results['train_ms']:.3f} ms, ensure_train_mode's check {results['check_ms']:.3f} ms\n")
    print(f"| trained tensors but the table ({results['tensors']}, {results['elements']:,} "
          'elements) | clip ms | AdamW step ms | zero_grad ms |')
    print('|---|---:|---:|---:|')
    for label, key in (('their own shapes', 'own_shapes'), ('one tensor of their size',
                                                            'one_tensor'),
                       (f'shrunk to <= {SHRUNK} per dimension', 'shrunk'),
                       ('one tensor of the shrunk size', 'one_shrunk')):
        part = results[key]
        print(f"| {label} | {part['clip']:.3f} | {part['step']:.3f} | {part['zero_grad']:.3f} |")
    if args.compile:
        step_mode = wrapper_compile_options('compiled_step', args.compile)['mode']
        print(f"| their own shapes, clip and step compiled ({step_mode}) | "
              f"{results['compiled']['step']:.3f} "
              f"(both; {results['compiled']['new_graphs']} graphs compiled for the timed calls' "
              'new lrs) | | |')
    print(f"\nbackward into {results['tensors']} leaves {results['backward_leaves']:.3f} ms, "
          f"into one {results['backward_one']:.3f} ms (shrunk sizes)")
    if args.compile:
        print(f"the forward compiled ({args.compile}): backward into {results['tensors']} leaves "
              f"{results['backward_compiled']:.3f} ms, by autograd's engine; "
              f"{results['backward_compiled_autograd']:.3f} ms traced by compiled autograd "
              '(the accumulation into the leaves compiled with the rest)')
    return results


if __name__ == '__main__':
    run_tool(main)
