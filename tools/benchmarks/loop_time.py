"""The training loop's time per iteration: DASD's cross-lingual phase as a run trains it.

``tools/benchmark.py`` times one batch's step again and again. A run's loop pays for more: each
batch is a new one, of one language and its own padded width (a compiled model compiles, or
records a CUDA graph, the first time it meets a language at a width); the loader's workers read
and tokenise beside the model; the loop sets the learning rate and reads the losses for its
non-finite check; the hooks time, log and look for checkpoints to save. This script trains DASD's
model of ``tools/benchmark.py`` (random towers of ``--arch``, the paper's 119,547 x 768 table,
dynamic adapters for de/fr/zh/ja and the disentangler) through MMEngine's ``Runner`` and xmr's
``PhasedTrainLoop``:

- the ``cross_lingual`` phase of ``configs/_base_/schedules/dasd_dynamic_phases.py`` (its
  optimiser, lr, warm-up, losses and feature cache), shortened to ``--iters``;
- the text loader of ``configs/_base_/datasets/train_loaders.py`` (batch 128, 2 workers);
- the default runtime's hooks (``configs/_base_/default_runtime.py``), without validation;
- text pairs of the synthetic captions (an English caption and its de/fr/zh/ja translations per
  scene), written as an xmr annotation with ``media_type: text`` and read by
  ``CaptionPairDataset``, as Multi30K's text pairs are.

Each iteration's time is the one the run logs (``IterTimerHook``'s ``train/time``: from the end
of one iteration to the end of the next, the wait for the loader included)::

    python tools/benchmarks/loop_time.py --device cuda --amp --compile reduce-overhead
    python tools/benchmarks/loop_time.py --arch tiny --device cpu --iters 20 --batch-size 16

It prints the first iteration, the one-off iterations (the first ``--warmup``, and each that met
a language at a target width for the first time: compiled, the model compiles for it or records
a CUDA graph),
the median and mean of the others (steady), the loader's wait among them, their median by part
on the host (:class:`IterationParts`: the hooks, the model's step by part, the one read of the
losses, where the iteration waits for the device), the target widths, and
the projected time of the paper's 45,000-step phase: this run's iterations, then the rest at the
steady mean.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import torch
from mmengine.hooks import Hook

from xmr.engine import loops
from xmr.fileio import atomic_write_text
from xmr.utils.cli import UserError, given_json_output, int_at_least, run_tool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmark  # noqa: E402  (tools/benchmark.py: the model of its rows)

REPO = Path(__file__).resolve().parents[2]
#: The paper's cross-lingual phase, in steps at batch 128.
PAPER_ITERS = benchmark.PAPER_STEPS['cross_lingual']


def write_text_pairs(path: Path, num_scenes: int) -> Path:
    """An xmr annotation of ``num_scenes`` synthetic training scenes as text pairs: each an
    English caption with its translation into every language of the benchmark, one style per
    scene."""
    from xmr.datasets.synthetic import CAPTION_STYLES, caption_scene, scene_at

    items = []
    for index in range(num_scenes):
        scene, style = scene_at(0, 'train', index), CAPTION_STYLES[index % len(CAPTION_STYLES)]
        items.append(dict(media_id=f'scene_{index:06d}',
                          captions=dict(en=[caption_scene(scene, 'en', style)]),
                          translations={lang: [caption_scene(scene, lang, style)]
                                        for lang in benchmark.LANGUAGES}))
    path.write_text(json.dumps(dict(
        format='xmr-media-captions', version=1, dataset='synthetic_text_pairs', split='train',
        media_type='text', languages=['en'], source_lang='en',
        translation_langs=list(benchmark.LANGUAGES), items=items), ensure_ascii=False),
        encoding='utf-8')
    return path


def loop_cfg(args: argparse.Namespace, work_dir: Path):
    """The run's config: DASD's cross-lingual phase on the synthetic text pairs."""
    from mmengine.config import Config

    from xmr.engine.amp import enable_amp
    from xmr.engine.optim_wrapper import wrapper_compile_options

    cfg = Config.fromfile(REPO / 'configs/_base_/default_runtime.py')
    schedule = Config.fromfile(REPO / 'configs/_base_/schedules/dasd_dynamic_phases.py')
    loaders = Config.fromfile(REPO / 'configs/_base_/datasets/train_loaders.py')
    model = benchmark.model_cfg(args.arch, None, False, str(work_dir / 'target_sp.model'),
                                'dasd')
    if args.compile:
        model['compile'] = dict(mode=args.compile)
    ann_file = write_text_pairs(work_dir / 'text_pairs.json', args.scenes)
    loader = dict(loaders.text_train_dataloader, batch_size=args.batch_size,
                  num_workers=args.workers, persistent_workers=args.workers > 0,
                  dataset=dict(type='CaptionPairDataset', ann_file=str(ann_file),
                               target_langs=list(benchmark.LANGUAGES)))
    phase = dict(schedule.train_cfg.phases[0], iters=args.iters)
    cfg.merge_from_dict(dict(
        work_dir=str(work_dir), model=model, device=args.device,
        train_dataloader=loader, text_train_dataloader=loader,
        train_cfg=dict(schedule.train_cfg, phases=[phase], val_interval=0,
                       validate_at_phase_end=False),
        optim_wrapper=schedule.optim_wrapper,
        # What the run would save after the last iteration is not what it is timed for.
        default_hooks=dict(checkpoint=dict(interval=args.iters + 1, save_last=False,
                                           save_best=None)),
        custom_hooks=[hook for hook in cfg.custom_hooks
                      if hook['type'] != 'WeightsOnlyCheckpointHook']))
    for option in benchmark.WRAPPER_SUFFIXES:
        if getattr(args, option):
            cfg.optim_wrapper[option] = wrapper_compile_options(option, args.compile)
    if args.amp:
        enable_amp(cfg)
    return cfg


def iteration_summary(times: Sequence[float], data_times: Sequence[float],
                      kinds: Sequence[Hashable | None], warmup: int,
                      paper_iters: int = PAPER_ITERS,
                      parts: Sequence[dict[str, float]] = ()) -> dict[str, Any]:
    """The figures of a run's iteration times in seconds (``train/time``, ``train/data_time``).

    The one-off iterations are the first ``warmup`` and each that met a kind of batch for the
    first time (``kinds``: its languages and target width, :class:`TargetWidths`; ``None``
    where unknown): a compiled model compiles for it, guarded on both, or records a CUDA graph.
    The others are steady. The projected phase is this run's
    iterations, then ``paper_iters`` less them at the steady mean. With ``parts`` (each
    iteration's seconds by part, :class:`IterationParts`), the steady iterations' median of each
    part, ``data`` the logged data time and ``other`` the rest of each iteration.
    """
    one_off, seen = set(range(min(warmup, len(times)))), set()
    for index, kind in enumerate(kinds):
        if kind is not None and kind not in seen:
            seen.add(kind)
            one_off.add(index)
    steady = [t for index, t in enumerate(times) if index not in one_off]
    if not steady:
        raise ValueError(f'all {len(times)} iterations are one-off (the first {warmup}, and '
                         'those that met a new kind of batch): run more iterations (--iters)')
    mean = statistics.fmean(steady)
    by_part = [dict(data=data_times[index], **parts[index],
                    other=times[index] - data_times[index] - sum(parts[index].values()))
               for index in range(len(parts)) if index not in one_off]
    names = [name for name in benchmark.STEP_PARTS if any(name in p for p in by_part)]
    parts_ms = {name: 1000 * statistics.median(p.get(name, 0.0) for p in by_part)
                for name in names}
    return dict(iterations=len(times), first_ms=1000 * times[0], one_off=len(one_off),
                one_off_s=sum(times[index] for index in one_off),
                median_ms=1000 * statistics.median(steady), mean_ms=1000 * mean,
                data_median_ms=1000 * statistics.median(
                    t for index, t in enumerate(data_times) if index not in one_off),
                paper_phase_min=(sum(times) + (paper_iters - len(times)) * mean) / 60,
                **(dict(parts_median_ms=parts_ms) if parts else {}))


class IterationParts(Hook):
    """Splits each iteration of the run into parts on the host, as ``tools/benchmark.py``'s
    :class:`StepParts` splits a step: the iteration's ``hooks``, the model's step by part
    (``preprocess``, ``forward``, ``backward``, ``clip``, ``optimizer``, ``zero_grad``) and the
    loop's one read of the losses and the norm (``wait``, the iteration's wait for the device).
    Set up when the run starts (``before_train``: the optimiser wrapper is built by then); the
    loop's read is restored by :meth:`restore`."""

    priority = 'HIGHEST'

    def __init__(self) -> None:
        self.parts = benchmark.StepParts()
        self.iterations: list[dict[str, float]] = []
        self._read = loops.read_to_host

    def before_train(self, runner) -> None:
        parts, loop = self.parts, runner.train_loop
        parts.wrap_step(runner.model, runner.optim_wrapper)
        parts.wrap(runner, 'call_hook', 'hooks')
        parts.wrap(loops, 'read_to_host', 'wait')
        run_iter = loop.run_iter

        def timed_iteration(data_batch: Any) -> None:
            parts.take()  # what ran between iterations is the logged data time's
            run_iter(data_batch)
            self.iterations.append(parts.take())

        loop.run_iter = timed_iteration

    def restore(self) -> None:
        loops.read_to_host = self._read


class TargetWidths(Hook):
    """Records each training batch's kind: its languages and its target width, as the loader's
    workers tokenised it (the compiled step is guarded on both: one language a batch, the
    shipped ``LanguageBatchSampler``'s, compiles once per language).

    A hook of the run (``before_train_iter``), it reads the batch's ``tokens`` and so costs the
    iteration no tokenising; a loader without workers leaves the batch untokenised, and the
    kinds unknown.
    """

    priority = 'LOWEST'

    def __init__(self) -> None:
        self.kinds: list[tuple[str, int] | None] = []

    def before_train_iter(self, runner, batch_idx: int, data_batch: dict | None = None) -> None:
        tokens = (data_batch or {}).get('tokens', {}).get('target_tokens')
        langs = ' '.join(sorted(set((data_batch or {}).get('lang') or ())))
        self.kinds.append(None if tokens is None else (langs, int(tokens['input_ids'].shape[1])))

    @property
    def widths(self) -> list[int]:
        """The target widths met, sorted."""
        return sorted({kind[1] for kind in self.kinds if kind is not None})


def report(figures: dict[str, Any], warmup: int) -> str:
    """The run's figures in words."""
    compiled = figures['compile'] != 'eager'
    one_off = f'the first {warmup}' + (', each new language and target width' if compiled
                                       else '')
    lines = [
        f'{figures["iterations"]} iterations of DASD cross_lingual ({figures["arch"]}, batch '
        f'{figures["batch_size"]}, {"bf16" if figures["amp"] else "fp32"}, {figures["compile"]}'
        f'{" with the backward traced" if figures["compiled_autograd"] else ""}'
        f'{" with the step compiled" if figures["compiled_step"] else ""}, '
        f'{figures["workers"]} workers) on {figures["device"]}',
        f'the first {figures["first_ms"]:.1f} ms; {figures["one_off"]} one-off iterations '
        f'({one_off}) {figures["one_off_s"]:.1f} s',
        f'the others: median {figures["median_ms"]:.2f} ms, mean {figures["mean_ms"]:.2f} ms, '
        f'the loader\'s wait median {figures["data_median_ms"]:.2f} ms',
        *(['the others by part on the host, median ms: '
           + benchmark.parts_ms_text(figures['parts_median_ms'])]
          if 'parts_median_ms' in figures else []),
        f'the paper\'s {PAPER_ITERS}-step phase projected at batch {figures["batch_size"]}'
        + ('' if figures['batch_size'] == 128 else ' (the paper\'s is 128)')
        + f': {figures["paper_phase_min"]:.1f} min',
        f'train() {figures["train_s"]:.0f} s, building the feature cache included'
        + ('' if figures['peak_mib'] is None else
           f', the device\'s peak {figures["peak_mib"]:.0f} MiB allocated')
        + f'; target widths {figures["target_widths"]}']
    if compiled:
        lines.append('compiled: ' + ', '.join(f'{key} {figures[key]}' for key in
                                               ('graphs', 'graph_breaks', 'recompiles',
                                                'cudagraph_skips')))
    return '\n'.join(lines)


#: Keys every run's figures hold, by which ``--out`` tells an earlier run's file from another.
FIGURE_KEYS = ('arch', 'device', 'amp', 'compile', 'batch_size', 'workers', 'train_s',
               'target_widths')


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--arch', default='ViT-B-32',
                        help="open_clip architecture of the random towers, or 'tiny'")
    parser.add_argument('--device', default='cuda', help="'cuda', 'cuda:N' or 'cpu'")
    parser.add_argument('--amp', action='store_true', help='bf16 autocast, as tools/train.py')
    parser.add_argument('--compile', choices=['default', 'reduce-overhead'],
                        help="the model's compile mode (none: eager)")
    parser.add_argument('--compiled-autograd', action='store_true',
                        help="with --compile, the backward traced whole too, in the same mode "
                             '(optim_wrapper.compiled_autograd)')
    parser.add_argument('--compiled-step', action='store_true',
                        help='with --compile, the clip and the optimiser step compiled too, in '
                             'the same mode without CUDA graphs (optim_wrapper.compiled_step)')
    parser.add_argument('--iters', type=int_at_least(1), default=600,
                        help='iterations of the phase')
    parser.add_argument('--warmup', type=int_at_least(0), default=10,
                        help='first iterations left out of the steady figures (besides each '
                             'that meets a new language and target width)')
    parser.add_argument('--batch-size', type=int_at_least(1), default=128,
                        help="the text loader's batch")
    parser.add_argument('--workers', type=int_at_least(0), default=2,
                        help="the text loader's workers (persistent when more than 0)")
    parser.add_argument('--scenes', type=int_at_least(1), default=20000,
                        help='synthetic scenes: 4 pairs each')
    parser.add_argument('--work-dir', help='default: a temporary directory')
    parser.add_argument('--out', help='write the figures as JSON here')
    parser.add_argument('--overwrite', action='store_true',
                        help="let --out replace an earlier run's figures")
    args = parser.parse_args(argv)
    if args.iters <= args.warmup:  # the figures are those of the steady iterations
        parser.error(f'--iters {args.iters} leaves no steady iteration after the first '
                     f'{args.warmup} (--warmup): give --iters above {args.warmup}')
    if args.out is not None:  # checked before the run, minutes long, that writes it
        try:
            given_json_output(args.out, '--out', "an earlier run's figures", FIGURE_KEYS,
                              args.overwrite)
        except UserError as error:
            parser.error(str(error))
    elif args.overwrite:
        parser.error("--overwrite lets --out replace an earlier run's figures: give --out")
    for option in benchmark.WRAPPER_SUFFIXES:
        if getattr(args, option) and not args.compile:
            parser.error(f"--{option.replace('_', '-')} compiles in the mode of --compile: "
                         'give one')
    if torch.device(args.device).type == 'cuda' and not torch.cuda.is_available():
        parser.error(f'--device {args.device}: torch sees no CUDA device here; on a CPU give '
                     '--device cpu')
    if args.compile and args.workers == 0:
        parser.error('--compile needs --workers >= 1: a compiled run\'s one-off iterations '
                     'are those meeting a new language and target width, known from the '
                     'batches the workers tokenise')

    if args.work_dir is None:
        work_dir = Path(tempfile.mkdtemp(prefix='loop_time_'))
        try:
            return measure(args, work_dir)
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
    Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    return measure(args, Path(args.work_dir))


def measure(args: argparse.Namespace, work_dir: Path) -> dict[str, Any]:
    """Train the timed run in ``work_dir``; print and return its figures."""
    from mmengine.runner import Runner

    from xmr.engine.compile_counts import compile_counts, reset_compile_counts

    reset_compile_counts()  # the compiled run's graphs, breaks and recompilations are its own
    runner = Runner.from_cfg(loop_cfg(args, work_dir))
    widths, split = TargetWidths(), IterationParts()
    runner.register_hook(widths)
    runner.register_hook(split)
    cuda = torch.device(args.device).type == 'cuda'
    if cuda:
        torch.cuda.reset_peak_memory_stats(args.device)
    started = time.perf_counter()
    try:
        runner.train()
    finally:
        split.restore()
    wall = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated(args.device) / 2 ** 20 if cuda else None
    hub = runner.message_hub
    times = hub.get_scalar('train/time').data[0].tolist()
    data_times = hub.get_scalar('train/data_time').data[0].tolist()
    figures = dict(arch=args.arch, device=args.device, amp=args.amp,
                   compile=args.compile or 'eager', compiled_autograd=args.compiled_autograd,
                   compiled_step=args.compiled_step,
                   batch_size=args.batch_size, workers=args.workers, train_s=wall,
                   peak_mib=peak,
                   # Eager code meets a new kind of batch as any other.
                   **iteration_summary(times, data_times,
                                       widths.kinds if args.compile else [], args.warmup,
                                       parts=split.iterations),
                   target_widths=widths.widths,
                   **(compile_counts() if args.compile else {}))
    print(report(figures, args.warmup))
    if args.out:
        atomic_write_text(args.out, json.dumps(figures, indent=1))
    return figures


if __name__ == '__main__':
    run_tool(main)
