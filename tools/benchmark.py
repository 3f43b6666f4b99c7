"""Train-step and evaluation throughput: the authors' recompute path against xmr's default.

Methods: ``static`` (MLA's static adapters, hidden 256) and ``dasd`` (DASD's dynamic adapters,
d_u 32, with the semantics disentangling module, the parameter generator and the pair
discriminator: the paper's configuration, L_CL/L_CM + L_adv + 0.1 L_sc).

Paths (same model, same inputs, same seed):
  authors     (dasd only; the DASD rows' baseline) recompute, plus what the authors' DASD step
              pays on top: gradients of the frozen weights the target branch runs (their code
              leaves requires_grad on; their teacher passes run under no_grad), clipped with
              the rest and never applied (their optimiser holds the trained weights alone), a
              per-parameter Adam loop (their BertAdam) and the discriminator's own second
              update. It omits their data loading, BertAdam's exact update rule (the cost of
              one loop of elementwise ops per tensor is kept), the frozen gradients'
              accumulation across steps (their zero_grad leaves them) and their two-class
              discriminator output; it is a lower bound of their step
  recompute   the frozen towers run every step (English caption -> r^S, image / 12 frames ->
              r^V) and every caption is padded to 77 tokens, as in the authors' code (the static
              rows' baseline: it omits the costs the authors path adds, so it understates what
              xmr saves)
  xmr         r^S / r^V read from a memory-mapped feature cache, captions padded to the
              batch's longest, the text blocks run on packed tokens on the CPU and on the
              padded batch on a GPU (xmr's default, pack_tokens='auto')
  xmr+sparse  (static) xmr, plus SparseAdam on the embedding table (only the batch's rows
              update) instead of the faithful dense AdamW over all of it (cross_lingual only)
  xmr-padded  (static) xmr with packing off: the blocks run the padding too (cross_lingual only)
  xmr-packed  (static) xmr with packing on: the blocks skip the padding (cross_lingual only;
              one of the two equals xmr on each device, the other measures the choice)
  xmr-compile (dasd, with --compile default) xmr with the model's ``compile`` option: its
              training losses, forward and backward, compiled by ``torch.compile`` (Inductor's
              fused kernels) on the padded batch (to a multiple of 8 tokens); in eval, the
              encoding of the English and German captions
  xmr-graphs  (dasd, with --compile reduce-overhead) the same, replayed as CUDA graphs. The
              first step compiles (its time is reported); every step here sees the same batch,
              while a run's batches change their padded width, for which the compiled code
              is made dynamic and a CUDA graph recorded per width (see docs/benchmarks.md,
              "A compiled step")
  ...+ca      (with --compiled-autograd) a compiled training row whose backward compiled
              autograd traces and compiles whole, in the row's mode: the accumulation of each
              gradient into its parameter inside the graph (optim_wrapper.compiled_autograd)
  ...+step    (with --compiled-step) a compiled training row whose clip and optimiser step
              are compiled too, in the row's mode without CUDA graphs: foreach AdamW with
              its lr a device tensor (optim_wrapper.compiled_step); with both options, also a
              row with both suffixes

Cases: cross_lingual (L_CL), cross_modal (L_CM, images), video (L_CM, 12-frame clips), eval
(embedding a gallery batch and its English + German captions). The model has ViT-B/32 size with
random weights; the target branch has the paper's 119,547 x 768 embedding table and the
method's adapters for de/fr/zh/ja; captions come from the bundled synthetic set. The summary
projects the paper's schedule (45k cross_lingual + 6k cross_modal steps) from the step times.

A step is: the data path (fetch the batch's items, through the feature cache for xmr; collate;
tokenise, as a run's dataloader workers do), then normalise, forward, backward, clip, optimiser
step; the same batch every step. Each row also reports the data path's time and the step
without it (``model ms``): in a run the loader's workers do the data path beside the model, so
with enough workers the model's time is the step's. A training row reports a third time,
``unwaited ms``: the model's step when the host never waits for the device (steps queued back
to back, the losses and the gradients' norm left unread; see ``unwaited_steps``). The summary
splits each xmr row's fastest step into its parts (data, preprocess, forward, backward, clip,
optimizer, zero_grad, wait, ...; see ``StepParts``): on a GPU, the host's time in each. Each
(case, path, precision) row runs in a fresh process so that its peak memory is its own (CPU:
peak RSS of the process, model included; CUDA: peak allocated). The first step's loss of each
path is printed: all paths see the same inputs, weights and shuffled negatives, so they agree up
to fp rounding. Building the cache (once per dataset in real use) is not timed. Times are those
of the fastest timed step (other processes only ever add time). Besides wall-clock
time, each row reports the process's CPU time per step (all threads), which other processes on
a shared machine disturb far less; on a busy CPU host compare the CPU-time speed-ups.

Examples::

    python tools/benchmark.py                      # CPU: batch 32, fp32 (< 10 min on 2 cores)
    python tools/benchmark.py --device cuda        # batch 128, fp32 and AMP, static and DASD
    python tools/benchmark.py --methods dasd       # DASD against the authors' step, on CPU
    python tools/benchmark.py --cases cross_lingual --steps 5 --out bench.json
"""
from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from xmr.utils.cli import (
    UserError,
    given_device,
    given_file,
    given_folder,
    given_json_output,
    given_output,
    int_at_least,
    run_tool,
)

CASES = ('cross_lingual', 'cross_modal', 'video', 'eval')
METHODS = ('static', 'dasd')
#: Each method's paths, its baseline first (cross_lingual runs them all, other cases the first
#: paths up to and including 'xmr').
PATHS = {'static': ('recompute', 'xmr', 'xmr+sparse', 'xmr-padded', 'xmr-packed'),
         'dasd': ('authors', 'recompute', 'xmr')}
#: ``torch.compile`` modes of ``--compile`` and the path of each.
COMPILED_PATHS = {'default': 'xmr-compile', 'reduce-overhead': 'xmr-graphs'}
#: The suffix of a compiled training row for each option of xmr's optimiser wrapper that it
#: sets in the row's ``torch.compile`` mode (``--compiled-autograd``, ``--compiled-step``).
WRAPPER_SUFFIXES = {'compiled_autograd': '+ca', 'compiled_step': '+step'}
#: The disentangler's losses at full scale (its own lambda1 = 1, lambda2 = 0.1 apply first).
LOSS_WEIGHTS = {'static': dict(), 'dasd': dict(disentangler=1.0)}
#: Steps of the paper's schedule at batch 128, for the projected wall time.
PAPER_STEPS = {'cross_lingual': 45000, 'cross_modal': 6000}
LANGUAGES = ('de', 'fr', 'zh', 'ja')
#: Paper-size target embedding table (mBERT's word embeddings).
TABLE = dict(vocab_size=119547, table_width=768)
#: A tiny CLIP for smoke tests of this tool (``--arch tiny``).
TINY_CLIP = dict(embed_dim=32,
                 vision_cfg=dict(image_size=32, layers=2, width=32, patch_size=8, head_width=16),
                 text_cfg=dict(context_length=77, vocab_size=49408, width=32, heads=2, layers=2))
TINY_TABLE = dict(vocab_size=2000, table_width=24)
#: Steps each row runs under torch.profiler with --profile.
PROFILED_STEPS = 3
#: The keys of the JSON ``--out`` holds, by which an earlier benchmark's rows are told apart
#: from any other file standing there.
RESULT_KEYS = {'arch', 'device', 'batch_size', 'frames', 'steps', 'warmup', 'rows'}
#: The parts of a step (:class:`StepParts`) in the order the step runs them; ``other`` is the
#: rest (MMEngine's and the model's glue between the parts).
STEP_PARTS = ('data', 'hooks', 'preprocess', 'forward', 'encode', 'backward', 'clip',
              'optimizer', 'zero_grad', 'authors discriminator', 'wait', 'other')
#: Steps queued back to back in each window of the unwaited measurement (``unwaited_steps``).
UNWAITED_WINDOW = 5
#: What torch's sync debug mode warns at each wait. Its first use in a process also warns that the
#: mode "does not yet detect all synchronizing operations": a wait to count only by this message.
WAIT_WARNING = 'called a synchronizing CUDA operation'
TARGETS = {('static', 'cross_lingual'): 3.0, ('static', 'video'): 5.0,
           ('dasd', 'cross_lingual'): 5.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--device', default='cpu', help="'cpu', 'cuda' or 'cuda:N'")
    parser.add_argument('--cases', default=','.join(CASES),
                        help=f'comma-separated subset of {CASES}')
    parser.add_argument('--methods', help=f'comma-separated subset of {METHODS} (default: '
                        'static on CPU, both on CUDA)')
    parser.add_argument('--batch-size', type=int_at_least(1),
                        help='samples per step (default: 32 on CPU, 128 on CUDA)')
    parser.add_argument('--steps', type=int_at_least(1),
                        help='timed steps (default: 2 on CPU, 20 on CUDA)')
    parser.add_argument('--warmup', type=int_at_least(0),
                        help='untimed steps first (default: 1 on CPU, 5 on CUDA)')
    parser.add_argument('--frames', type=int_at_least(1), default=12,
                        help='frames per video (DASD: 12)')
    parser.add_argument('--amp', choices=['none', 'amp', 'both'],
                        help="precisions: fp32 ('none'), autocast ('amp': bf16, fp16 on GPUs "
                        "without bf16), or both (default: none on CPU, both on CUDA)")
    parser.add_argument('--arch', default='ViT-B-32',
                        help="open_clip architecture (random weights, run with the record of "
                             "its 'openai' tag, else its first tag: ViT-B-16-SigLIP2-256 runs "
                             "as 'webli'), or 'tiny' for a smoke test")
    parser.add_argument('--tokenizer-file', help="tokenizer.json standing in for the Hugging "
                        "Face tokenizer of an architecture that reads one (SigLIP's Gemma "
                        "tokenizer): the figures time the model, not the vocabulary")
    parser.add_argument('--threads', type=int_at_least(1),
                        help="torch CPU threads in each run (default: torch's own)")
    parser.add_argument('--work-dir', help='tokenizer model and feature caches (default: temp)')
    parser.add_argument('--out', help='write the rows as JSON here, each as it ends (a run '
                        'stopped by Ctrl-C or SIGTERM keeps those it finished)')
    parser.add_argument('--overwrite', action='store_true',
                        help="let --out replace an earlier benchmark's rows")
    parser.add_argument('--in-process', action='store_true',
                        help='run every row in this process (saves a start per row; on the CPU '
                        'the memory column then is the peak so far, on CUDA it stays per row)')
    parser.add_argument('--profile', metavar='FILE',
                        help=f'after its timed steps, run {PROFILED_STEPS} more steps of each row '
                        'under torch.profiler and append where the time goes to FILE (Markdown)')
    parser.add_argument('--compile', default='', metavar='MODES',
                        help='comma-separated torch.compile modes, each adding a row per DASD '
                        f"case ({', '.join(f'{m}: {p}' for m, p in COMPILED_PATHS.items())}); "
                        'the first step of such a row compiles (its time is reported)')
    for option, compiled in (('compiled_autograd', 'backward traced whole by compiled '
                              'autograd'),
                             ('compiled_step', 'clip and optimiser step compiled')):
        parser.add_argument(f"--{option.replace('_', '-')}", action='store_true',
                            help=f'with --compile, add each compiled training row again with its '
                            f'{compiled}, in the same mode (path suffix '
                            f"{WRAPPER_SUFFIXES[option]}: xmr's optim_wrapper.{option})")
    parser.add_argument('--one', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cuda = args.device.startswith('cuda')
    args.batch_size = args.batch_size or (128 if cuda else 32)
    args.steps = args.steps if args.steps is not None else (20 if cuda else 2)
    args.warmup = args.warmup if args.warmup is not None else (5 if cuda else 1)
    args.amp = args.amp or ('both' if cuda else 'none')
    args.methods = args.methods or (','.join(METHODS) if cuda else 'static')
    try:
        given_device(args.device)  # every row would fail on it, each with its traceback
        if args.out is not None:  # checked before the first row, which writes it
            given_json_output(args.out, '--out', "an earlier benchmark's rows", RESULT_KEYS,
                              args.overwrite)
        if args.profile is not None:
            check_profile_path(args)
        if args.tokenizer_file is not None:
            check_tokenizer_file(args.tokenizer_file, args.arch)
        if args.work_dir is not None:
            given_folder(args.work_dir, '--work-dir', 'give a folder (made if absent) for the '
                         'tokenizer model and the feature caches')
    except UserError as error:
        parser.error(str(error))
    if args.overwrite and args.out is None:
        parser.error("--overwrite lets --out replace an earlier benchmark's rows: give --out")
    for option, known in (('cases', CASES), ('methods', METHODS), ('compile', COMPILED_PATHS)):
        chosen = [name for name in getattr(args, option).split(',') if name]
        unknown = sorted(set(chosen) - set(known))
        if unknown:
            parser.error(f'unknown {option} {unknown}; choose from {known}')
        if not chosen and option != 'compile':
            parser.error(f'--{option} names none of {known}')
        setattr(args, option, ','.join(chosen))
    if args.compile and 'dasd' not in args.methods.split(','):
        parser.error('--compile adds compiled DASD rows: add dasd to --methods')
    for option in WRAPPER_SUFFIXES:
        if getattr(args, option) and not args.compile:
            parser.error(f"--{option.replace('_', '-')} adds each compiled row again: give "
                         '--compile')
    return args


def check_tokenizer_file(path: str, arch: str) -> None:
    """Refuse a ``--tokenizer-file`` no row would read: missing, or given for an architecture
    that tokenizes with CLIP's BPE (its rows ran with the BPE and said nothing)."""
    from xmr.models.backbones.open_clip_pretrained import text_tokenizer_cfg

    given_file(path, '--tokenizer-file', 'give a Hugging Face tokenizer.json')
    if arch == 'tiny' or 'name_or_path' not in (text_tokenizer_cfg(arch, None) or {}):
        raise UserError(f'{path} (--tokenizer-file)', f"--arch {arch} tokenizes with CLIP's "
                        'BPE and reads no tokenizer file', 'leave --tokenizer-file out, or give '
                        'an --arch with a Hugging Face tokenizer (ViT-B-16-SigLIP2-256)')


# ----------------------------------------------------------------------------------- one row
def backbone_cfg(arch: str, pad_to: int | None, tokenizer_file: str | None = None,
                 probe: bool = False) -> dict[str, Any]:
    """Random towers of ``arch`` run with its pretrained record (QuickGELU for OpenAI's tag, the
    shipped configs' setting), CLIP's BPE or the architecture's Hugging Face tokenizer."""
    import open_clip

    from xmr.models.backbones.open_clip_pretrained import text_tokenizer_cfg

    if arch == 'tiny':
        return dict(type='OpenCLIPBackbone', pretrained=None, arch=None, model_cfg=TINY_CLIP,
                    tokenizer=dict(type='OpenCLIPTokenizer', pad_to=pad_to))
    tags = open_clip.list_pretrained_tags_by_model(arch)
    tokenizer = text_tokenizer_cfg(arch, None) or dict(type='OpenCLIPTokenizer')
    if tokenizer_file and 'name_or_path' in tokenizer:
        tokenizer.pop('name_or_path')
        tokenizer['tokenizer_file'] = tokenizer_file
        if not open_clip.get_model_config(arch)['text_cfg'].get('hf_model_name'):
            # A lone file names no pad token, which a SigLIP tower refuses to guess; the
            # stand-in times the model, so SigLIP's own padding id (T5's and Gemma's <pad>)
            # serves. A Hugging Face encoder (XLM-R: 1) masks its own id, which the guess finds.
            tokenizer['pad_id'] = 0
    # A fixed-context tower pads to its context itself (the backbone's default).
    if not probe and fixed_context(arch, tokenizer_file) is None:
        tokenizer['pad_to'] = pad_to
    return dict(type='OpenCLIPBackbone', pretrained=None, arch=arch, tokenizer=tokenizer,
                pretrained_cfg='openai' if 'openai' in tags or not tags else tags[0])


def model_cfg(arch: str, pad_to: int | None, sparse: bool, sp_model: str,
              method: str = 'static', tokenizer_file: str | None = None) -> dict[str, Any]:
    """Retriever config: random towers, paper-size table, the method's modules (DASD's as in
    configs/_base_/models/dasd_sdm.py). A fixed-context tower (SigLIP) pads every caption to its
    context on every path (the branch sets it), so ``pad_to`` applies to the others."""
    tiny = arch == 'tiny'
    backbone = backbone_cfg(arch, pad_to, tokenizer_file)
    fixed = None if tiny else fixed_context(arch, tokenizer_file)
    dasd = method == 'dasd'
    extra = dict(disentangler=dict(
        type='SemanticsDisentangler', depth=1, adapter=dict(type='StaticAdapter', hidden=256),
        generator=dict(d_z=512, d_u=32), consistency_loss=dict(type='AlignmentLoss', kind='l1'),
        discriminator=dict(hidden=(256, 128)))) if dasd else {}
    return dict(
        type='CrossLingualRetriever', backbone=backbone, **extra,
        language_branch=dict(
            type='TargetLanguageBranch', languages=list(LANGUAGES),
            tokenizer=dict(type='SentencePieceTokenizer', model_file=sp_model,
                           pad_to=None if fixed else pad_to,
                           **(dict(max_length=fixed) if fixed else {}),
                           vocab_size=1000,
                           corpus=dict(type='synthetic_caption_corpus',
                                       languages=list(LANGUAGES), num_scenes=300)),
            embedding=dict(type='TargetEmbedding', sparse=sparse,
                           **(TINY_TABLE if tiny else TABLE)),
            adapters=(dict(type='DynamicAdapter', hidden=32) if dasd
                      else dict(type='StaticAdapter', hidden=256))))


def train_target_only(model) -> None:
    """Freeze all but the target branch and the disentangler, as the alignment phases do."""
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith(('language_branch.', 'disentangler.')))


@functools.cache
def fixed_context(arch: str, tokenizer_file: str | None = None) -> int | None:
    """The context a fixed-context text tower pads every caption to (SigLIP's 64), ``None``
    for a tower that takes any length: the tower's own ``fixed_context``, read from ``arch``
    built on the meta device (no weights, no compute). open_clip's Hugging Face encoders (XLM-R,
    mT5) mask their padding and are never fixed-context (docs/backbones.md); building one would
    fetch its encoder config, so they are answered without it."""
    import open_clip
    import torch

    from xmr.registry import MODELS

    if open_clip.get_model_config(arch)['text_cfg'].get('hf_model_name'):
        return None
    with torch.device('meta'):
        tower = MODELS.build(backbone_cfg(arch, None, tokenizer_file, probe=True)).text_tower
    return tower.context_length if tower.fixed_context else None


class ItemList:
    """Dataset items held in memory (media pre-decoded: the benchmark times the model)."""

    def __init__(self, items: list[dict[str, Any]], name: str) -> None:
        self.items = items
        self.metainfo = {'dataset': f'benchmark_{name}', 'items': len(items)}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return dict(self.items[index])


def make_items(case: str, batch: int, frames: int, size: int) -> list[dict[str, Any]]:
    """One batch of synthetic captions with random uint8 media of the tower's size."""
    import torch

    from xmr.datasets.synthetic import SyntheticPairDataset

    captions = SyntheticPairDataset(num_scenes=batch, languages=list(LANGUAGES), image_size=16)
    generator = torch.Generator().manual_seed(0)
    shape = (frames, 3, size, size) if case == 'video' else (3, size, size)
    items = []
    for index in range(batch):
        pair = captions[index * len(LANGUAGES) + index % len(LANGUAGES)]
        media = (None if case == 'cross_lingual' else
                 torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator))
        item = dict(media=media, media_id=f'{case}_{index:05d}', index=index)
        if case == 'eval':
            german = captions[index * len(LANGUAGES)]
            item['captions'] = {'en': [pair['source_text']], 'de': [german['target_text']]}
        else:
            item.update(source_text=pair['source_text'], target_text=pair['target_text'],
                        lang=pair['lang'])
        items.append(item)
    return items


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Time one (case, path, precision) row."""
    import torch

    from xmr.datasets.collate import retrieval_collate
    from xmr.engine.compile_counts import compile_counts, reset_compile_counts
    from xmr.engine.feature_cache import CachedFeatureDataset
    from xmr.engine.frozen_casts import FrozenWeightCasts
    from xmr.engine.loops import ensure_train_mode, read_to_host
    from xmr.engine.optim_wrapper import wrapper_compile_options
    from xmr.engine.worker_tokens import TokenizingCollate
    from xmr.registry import MODELS, OPTIM_WRAPPER_CONSTRUCTORS

    if spec.get('threads'):
        torch.set_num_threads(spec['threads'])
    device = torch.device(spec['device'])
    case, path, method = spec['case'], spec['path'], spec.get('method', 'static')
    recompute = path in ('recompute', 'authors')
    base_path, wrapper_options = split_path(path)
    compile_mode = next((m for m, p in COMPILED_PATHS.items() if p == base_path), None)
    if compile_mode:
        import torch._inductor.config
        # Eager's random draws, so that the shuffled negatives are the other paths'.
        torch._inductor.config.fallback_random = True
        torch._dynamo.reset()
        reset_compile_counts()
    torch.manual_seed(0)
    model = MODELS.build(dict(model_cfg(spec['arch'], 77 if recompute else None,
                                        path == 'xmr+sparse', spec['sp_model'], method,
                                        spec.get('tokenizer_file')),
                              compile=compile_mode and dict(mode=compile_mode)))
    model = model.to(device)
    # The authors' code runs every padded position through the blocks.
    if recompute or path in ('xmr-padded', 'xmr-packed'):
        model.backbone.text_tower.pack_tokens = path == 'xmr-packed'
    train_target_only(model)
    phase = 'cross_lingual' if case == 'cross_lingual' else 'cross_modal'
    model.set_phase(phase, dict({'cross_lingual': dict(cl=1.0)}.get(case, dict(cm=1.0)),
                                **LOSS_WEIGHTS[method]))
    items = make_items(case, spec['batch_size'], spec['frames'], model.backbone.image_size[0])
    dataset: Any = ItemList(items, case)
    if not recompute:
        # A --work-dir reused with other sizes holds another setup's cache: built anew.
        dataset = CachedFeatureDataset(dataset, Path(spec['work_dir']) / f'cache_{case}',
                                       batch_size=min(64, spec['batch_size']),
                                       rebuild_if_stale=True)
        dataset.prepare(model)
    wrapper = None
    if case != 'eval':
        wrapper_cfg = dict(type='OptimWrapper', clip_grad=dict(max_norm=1.0),
                           optimizer=dict(type='AdamW', lr=1e-5, betas=(0.9, 0.98), eps=1e-6,
                                          weight_decay=0.2))
        if spec['precision'] == 'amp':
            wrapper_cfg['type'] = 'AutocastOptimWrapper'
        if path == 'authors':
            wrapper_cfg['optimizer'].update(foreach=False, fused=False)
        wrapper_cfg.update((option, wrapper_compile_options(option, compile_mode))
                           for option in wrapper_options)
        wrapper = OPTIM_WRAPPER_CONSTRUCTORS.build(dict(
            type='PhasedOptimWrapperConstructor', optim_wrapper_cfg=wrapper_cfg))(model)
    frozen_casts = FrozenWeightCasts()
    authors_extra = (AuthorsDASDCosts(model, wrapper) if path == 'authors' and wrapper is not None
                     else None)
    cuda = device.type == 'cuda'
    # Tokenised in the collate, as the loops' dataloader workers do (xmr.engine.worker_tokens).
    collate = TokenizingCollate(retrieval_collate, model.data_preprocessor.tokenize)
    parts = StepParts()
    parts.wrap_step(model, wrapper)
    if authors_extra is not None:
        parts.wrap(authors_extra, 'update_discriminator', 'authors discriminator')

    def fetch() -> dict[str, Any]:
        with torch.profiler.record_function(DATA_PATH):
            return collate([dataset[i] for i in range(len(dataset))])

    trained_modules = None

    def train(batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        nonlocal trained_modules
        # As PhasedTrainLoop does before each iteration.
        trained_modules = ensure_train_mode(model, trained_modules)
        outputs = model.train_step(batch, wrapper)
        if authors_extra is not None:
            authors_extra.update_discriminator()
        return outputs

    def step() -> float | None:
        with parts.part('data'):
            batch = fetch()
        if wrapper is None:
            # As the evaluation loops run it (in eval mode, set once per evaluation): without
            # autograd; under autocast, the frozen weights cast once.
            with torch.no_grad(), ExitStack() as amp:
                if spec['precision'] == 'amp':
                    amp.enter_context(torch.autocast(device.type, dtype=_amp_dtype(device.type)))
                    amp.enter_context(frozen_casts.swapped_into(model))
                model.val_step(batch)
            return None
        outputs = train(batch)
        # As the loop does: the losses and the norm read in one copy (the step's one wait), then
        # the norm logged.
        with parts.part('wait'):
            outputs, wrapper.pending_norm = read_to_host(outputs, wrapper.pending_norm)
            wrapper.log_pending_norm()
        return float(outputs['loss'])

    if wrapper is None:
        model.eval()
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(1)  # every path draws the same shuffled negatives
    first_loss = None
    times, cpu_times, step_parts = [], [], []
    for index in range(spec['warmup'] + spec['steps']):
        parts.take()
        started, cpu_started = time.perf_counter(), time.process_time()
        loss = step()
        if cuda:
            with parts.part('wait'):
                torch.cuda.synchronize(device)
        if index == 0:
            first_loss, first_step = loss, time.perf_counter() - started
        if index >= spec['warmup']:
            times.append(time.perf_counter() - started)
            cpu_times.append(time.process_time() - cpu_started)
            step_parts.append(parts.take())
    # The fastest timed step: other processes on a shared host only ever add time.
    seconds = min(times)
    fastest = times.index(seconds)
    timed_data = [timed['data'] for timed in step_parts]
    model_seconds = min(total - data for total, data in zip(times, timed_data))
    # The timed steps' peak, before the queued steps below hold several batches at once.
    memory = (torch.cuda.max_memory_allocated(device) / 2 ** 20 if cuda
              else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    unwaited = ({} if wrapper is None else
                unwaited_steps(train, [fetch() for _ in range(spec['steps'])], device))
    if spec.get('profile'):
        profile_steps(step, device, spec, seconds)
    padded = _padded_lengths(model, items, case, device)
    return dict(method=method, case=case, path=path, precision=spec['precision'],
                batch_size=spec['batch_size'], steps_per_s=1.0 / seconds,
                samples_per_s=spec['batch_size'] / seconds, step_ms=1000 * seconds,
                cpu_ms=1000 * min(cpu_times), data_ms=1000 * min(timed_data),
                model_ms=1000 * model_seconds, parts_ms=parts.in_ms(step_parts[fastest], seconds),
                peak_memory_mib=memory, first_loss=first_loss,
                first_step_s=first_step, **padded, **unwaited,
                **(compile_counts() if compile_mode else {}))


class StepParts:
    """The time of each part of a step (:data:`STEP_PARTS`), each without the parts it calls.

    The calls a step is made of are wrapped on their instances (:meth:`wrap`: the data
    preprocessor, the model's losses and encoders, the optimiser wrapper's backward, clip and
    zero_grad, the optimiser's step) or timed as blocks (:meth:`part`: the data path, the
    reading of the losses). On a GPU a call returns once its kernels are queued, so each part
    is the host's time, which is what a step bound by the host is made of, and ``wait`` is the
    host waiting for the device; the profiler's per-operator times add its own cost to each
    event, these add about a microsecond a call. On a CPU each part includes its arithmetic.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._nested: list[float] = []  # per open part: the time of the parts it called

    @contextmanager
    def part(self, name: str):
        started = time.perf_counter()
        self._nested.append(0.0)
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self.seconds[name] = self.seconds.get(name, 0.0) + elapsed - self._nested.pop()
            if self._nested:
                self._nested[-1] += elapsed

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        """Time every call of ``owner.attribute`` as the part ``name``."""
        call = getattr(owner, attribute)

        @functools.wraps(call)
        def timed(*args, **kwargs):
            with self.part(name):
                return call(*args, **kwargs)

        setattr(owner, attribute, timed)

    def wrap_step(self, model: Any, wrapper: Any | None) -> None:
        """Time the calls of a retriever's step as their parts: its data preprocessor, losses
        and encoders, and the optimiser wrapper's backward, clip, step and ``zero_grad``."""
        self.wrap(model.data_preprocessor, 'forward', 'preprocess')
        self.wrap(model, '_losses', 'forward')
        for encoder in ('_source_embeddings', '_target_embeddings'):
            self.wrap(model, encoder, 'encode')
        if wrapper is None:
            return
        # A compiled step's clip and optimiser step run inside its graphs: one part, untraced.
        compiled = getattr(wrapper, 'compiled_step', None) is not None
        stepping = ([(wrapper, 'step', 'optimizer')] if compiled else
                    [(wrapper, '_clip_grad', 'clip'), (wrapper.optimizer, 'step', 'optimizer')])
        for owner, call, part in ((wrapper, 'backward', 'backward'), *stepping,
                                  (wrapper, 'zero_grad', 'zero_grad')):
            self.wrap(owner, call, part)

    def take(self) -> dict[str, float]:
        """The seconds of each part since the last take."""
        seconds, self.seconds = self.seconds, {}
        return seconds

    @staticmethod
    def in_ms(seconds: dict[str, float], step: float) -> dict[str, float]:
        """``seconds`` of one step of ``step`` seconds in ms, in step order, ``other`` the rest."""
        parts = {name: 1000 * seconds[name] for name in STEP_PARTS if name in seconds}
        return dict(parts, other=1000 * step - sum(parts.values()))


def unwaited_steps(train, batches: list[dict[str, Any]], device) -> dict[str, Any]:
    """The model's step when the host never waits for the device: the steps of ``batches``
    (collated beforehand) queued back to back in windows of :data:`UNWAITED_WINDOW`, neither
    the losses nor the gradients' norm read, one synchronisation at the end of each window.

    A step of a run waits once: the loop reads the losses (for xmr's check for non-finite
    losses and for the log), waiting for the optimiser's step; xmr's optimiser wrapper then
    logs the norm it kept (:class:`~xmr.engine.optim_wrapper.OptimWrapper`). On a GPU the host
    then adds its own time to the device's instead of overlapping the two; this measures what
    the step would take without that wait. On CUDA the synchronising calls that remain are
    named, by ``torch.cuda.set_sync_debug_mode('warn')``.

    Returns:
        ``unwaited_ms``: the mean step of the fastest window (a window's mean is never below
        its fastest step, the statistic of the other times: the figure errs high);
        ``waits``: ``file:line`` of each call that still made the host wait (CUDA only; empty
        on a CPU, where nothing waits).
    """
    import warnings

    import torch

    cuda = device.type == 'cuda'
    means = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for start in range(0, len(batches), UNWAITED_WINDOW):
            window = batches[start:start + UNWAITED_WINDOW]
            if cuda:
                torch.cuda.synchronize(device)
                torch.cuda.set_sync_debug_mode('warn')
            started = time.perf_counter()
            try:
                for batch in window:
                    train(batch)
            finally:
                if cuda:
                    torch.cuda.set_sync_debug_mode('default')
            if cuda:
                torch.cuda.synchronize(device)
            means.append((time.perf_counter() - started) / len(window))
    waits = set()
    for warning in caught:
        if WAIT_WARNING in str(warning.message):
            waits.add(f'{Path(warning.filename).name}:{warning.lineno}')
        else:  # the windows' other warnings are shown as outside them
            warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                   warning.lineno)
    return dict(unwaited_ms=1000 * min(means), waits=sorted(waits))


#: The profiler's label of the data path: what a run's dataloader workers do.
DATA_PATH = 'xmr: data path'

#: Runtime calls counted per profiled step: kernel launches, and the calls that make the host wait
#: for the device (a synchronisation, or a copy to pageable memory such as ``.item()``).
LAUNCH_CALLS = ('cudaLaunchKernel', 'cudaLaunchKernelExC', 'cuLaunchKernel', 'cuLaunchKernelEx')
SYNC_CALLS = ('cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cudaEventSynchronize',
              'cudaMemcpy', 'cudaMemcpyAsync')


def profile_steps(step, device, spec: dict[str, Any], seconds: float) -> None:
    """Append one row's profile to ``spec['profile']``: per step, the device's busy time, the
    kernels launched and the host's waits, then the top operators by self time on the device
    and by self time on the host; :data:`DATA_PATH` is the data path's share."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from xmr.fileio import atomic_write_text

    cuda = device.type == 'cuda'
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    started = time.perf_counter()
    with profile(activities=activities) as profiler:
        for _ in range(PROFILED_STEPS):
            step()
        if cuda:
            torch.cuda.synchronize(device)
    profiled_ms = 1000 * (time.perf_counter() - started) / PROFILED_STEPS
    events = profiler.key_averages()
    counts = {event.key: event.count / PROFILED_STEPS for event in events}
    # Kernels only, as torch's own table totals them: a range annotation spans its kernels.
    device_ms = sum(event.self_device_time_total for event in events
                    if event.device_type == DeviceType.CUDA and not event.is_user_annotation
                    ) / 1000 / PROFILED_STEPS
    # The host's dispatch work, on any device: each call is at least one kernel on a GPU.
    aten_calls = sum(count for name, count in counts.items() if name.startswith('aten::'))
    data_ms = sum(event.cpu_time_total for event in events
                  if event.key == DATA_PATH) / 1000 / PROFILED_STEPS
    title = f"{spec.get('method', 'static')} {spec['case']} {spec['path']} {spec['precision']}"
    lines = [f'## {title}', '',
             f'- step: {1000 * seconds:.2f} ms timed, {profiled_ms:.2f} ms under the profiler, of '
             f'which {data_ms:.2f} ms the data path (fetch, collate, tokenise); device busy '
             f'{device_ms:.2f} ms',
             f'- per step: {sum(counts.get(name, 0) for name in LAUNCH_CALLS):.0f} kernel '
             f'launches, waits: ' + ', '.join(f'{name} {counts[name]:.0f}' for name in SYNC_CALLS
                                               if name in counts),
             f'- per step on the host: {aten_calls:.0f} ATen operator calls (nested calls '
             f"included), {counts.get('aten::_to_copy', 0):.0f} dtype or device copies "
             '(`aten::_to_copy`, autocast\'s casts among them)', '', '```',
             *(events.table(sort_by=key, row_limit=15, max_name_column_width=60)
               for key in (('self_device_time_total', 'self_cpu_time_total') if cuda
                           else ('self_cpu_time_total',))), '```', '']
    path = Path(spec['profile'])
    previous = path.read_text(encoding='utf-8') if path.exists() else ''
    atomic_write_text(path, previous + '\n'.join(lines) + '\n')


class AuthorsDASDCosts:
    """What the authors' DASD step pays beyond the recompute path (the ``authors`` rows).

    Every frozen weight keeps ``requires_grad`` (their code never turns it off), so backward
    computes the gradients of the frozen weights the target branch runs (the text blocks, the
    final norm and projection), which their ``clip_grad_norm_`` over every parameter clips
    with the rest, while their optimiser, built over the trained parameters alone, never
    applies them; their teacher passes (the English captions' ``r^S``, the media's ``r^V``) run
    under ``torch.no_grad()``, so no gradient reaches the towers through them. And the
    discriminator takes a second, own update on the step's detached ``(f^sa, r^S, r^S-)`` with
    a per-parameter Adam loop.

    Args:
        model: the row's retriever, its trained parameters already chosen
            (:func:`train_target_only`).
        wrapper: the row's optimiser wrapper, built over every parameter
            (``PhasedOptimWrapperConstructor``).
    """

    def __init__(self, model, wrapper) -> None:
        import torch

        frozen = [parameter for parameter in model.parameters() if not parameter.requires_grad]
        for parameter in frozen:
            parameter.requires_grad_(True)
        # With a backbone weight requiring grad, the model's frozen_tower() records the teacher
        # passes' graphs: their code's no_grad, kept on the instance.
        for encoder in ('encode_source', 'encode_media'):
            setattr(model, encoder, torch.no_grad()(getattr(model, encoder)))
        step = wrapper.optimizer.step

        @functools.wraps(step)
        def step_trained(*args, **kwargs):
            # Clipped with the rest, dropped before the step: Adam skips a parameter without a
            # gradient, as their optimiser never held the frozen ones.
            for parameter in frozen:
                parameter.grad = None
            return step(*args, **kwargs)

        wrapper.optimizer.step = step_trained
        discriminator = model.disentangler.discriminator
        self.loss = discriminator.loss
        self.optimizer = torch.optim.Adam(discriminator.parameters(), lr=1e-5, foreach=False,
                                          fused=False)
        self.inputs: tuple = ()
        discriminator.loss = self._capture

    def _capture(self, agnostic, source, negative_source):
        # Their code has no autocast: the second update runs in fp32 (CPU autocast leaves f^sa
        # in bf16, its LayerNorm not being one of the ops it runs in fp32).
        self.inputs = (agnostic.detach().float(), source.detach().float(),
                       negative_source.detach().float())
        return self.loss(agnostic, source, negative_source)

    def update_discriminator(self) -> None:
        self.optimizer.zero_grad()
        self.loss(*self.inputs).backward()
        self.optimizer.step()


def _amp_dtype(device_type: str):
    from xmr.engine.amp import amp_dtype

    return amp_dtype(device_type)


def _padded_lengths(model, items: list[dict[str, Any]], case: str, device) -> dict[str, Any]:
    """Padded token length of the batch's target (or German) and English captions, and the
    target tokens per caption the blocks run (the mean real length when they run packed)."""
    if case == 'eval':
        targets = [item['captions']['de'][0] for item in items]
        target_langs = ['de'] * len(items)
        sources = [item['captions']['en'][0] for item in items]
    else:
        targets = [item['target_text'] for item in items]
        target_langs = [item['lang'] for item in items]
        sources = [item['source_text'] for item in items]
    target = model.language_branch.tokenizer(targets, target_langs)
    padded = int(target['input_ids'].shape[1])
    # Compiled code runs the padded batch (packing's shapes depend on the data).
    packs = (model.compile_options is None and model.backbone.text_tower.packing(
        target['attention_mask'].to(device)) is not None)
    run = float(target['attention_mask'].sum(1).float().mean()) if packs else float(padded)
    source = model.backbone.tokenizer(sources, ['en'] * len(sources))
    return dict(target_tokens=padded, target_tokens_run=run,
                source_tokens=int(source['input_ids'].shape[1]))


# ----------------------------------------------------------------------------------- driver
def split_path(path: str) -> tuple[str, tuple[str, ...]]:
    """A row's path without its wrapper suffixes (appended in :data:`WRAPPER_SUFFIXES`'s
    order), and the options they name: ``'xmr-graphs+ca+step'`` -> ``('xmr-graphs',
    ('compiled_autograd', 'compiled_step'))``."""
    options: list[str] = []
    for option, suffix in reversed(WRAPPER_SUFFIXES.items()):
        if path.endswith(suffix):
            path = path.removesuffix(suffix)
            options.insert(0, option)
    return path, tuple(options)


def rows_to_run(args: argparse.Namespace) -> list[dict[str, Any]]:
    precisions = {'none': ['fp32'], 'amp': ['amp'], 'both': ['fp32', 'amp']}[args.amp]
    specs = []
    for method in args.methods.split(','):
        paths = PATHS[method]
        for case in args.cases.split(','):
            chosen = paths if case == 'cross_lingual' else paths[:paths.index('xmr') + 1]
            if method == 'dasd':
                compiled = tuple(COMPILED_PATHS[mode] for mode in args.compile.split(',') if mode)
                options = [option for option in WRAPPER_SUFFIXES
                           if case != 'eval' and getattr(args, option)]
                chosen += tuple(path + ''.join(WRAPPER_SUFFIXES[o] for o in subset)
                                for path in compiled for size in range(len(options) + 1)
                                for subset in itertools.combinations(options, size))
            for precision in precisions:
                specs.extend(dict(method=method, case=case, path=path, precision=precision)
                             for path in chosen)
    return specs


def run_in_subprocess(spec: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, '--one', json.dumps(spec)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-4000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def with_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add each row's speed-up over, and first-loss difference from, its method's baseline row
    (the first of ``PATHS[method]``), and where that is not the recompute path, its speed-up
    over the recompute path too (``recompute_speedup``: the issue's targets name that path)."""
    def key(row: dict[str, Any]) -> tuple:
        return row.get('method', 'static'), row['case'], row['precision']

    base = {key(r): r for r in rows if r['path'] == PATHS[r.get('method', 'static')][0]}
    recompute = {key(r): r for r in rows if r['path'] == 'recompute'}
    for row in rows:
        reference = base.get(key(row))
        if reference is None:
            continue
        row['speedup'] = reference['step_ms'] / row['step_ms']
        if reference['path'] != 'recompute' and key(row) in recompute:
            row['recompute_speedup'] = recompute[key(row)]['step_ms'] / row['step_ms']
        row['cpu_speedup'] = reference['cpu_ms'] / row['cpu_ms']
        if row['first_loss'] is not None and reference['first_loss'] is not None:
            row['loss_rel_diff'] = (abs(row['first_loss'] - reference['first_loss'])
                                    / max(abs(reference['first_loss']), 1e-12))
    return rows


def results_table(rows: list[dict[str, Any]], device: str) -> str:
    from xmr.evaluation.leaderboard import format_table

    unit = 'peak alloc MiB' if device.startswith('cuda') else 'peak RSS MiB'
    header = ['method', 'case', 'path', 'precision', 'steps/s', 'samples/s', 'ms/step',
              'data ms', 'model ms', 'unwaited ms', 'CPU ms/step', unit, 'tokens tgt/en',
              'tgt tokens run',
              'first loss', 'speed-up', 'CPU-time speed-up']
    cells = [[r.get('method', 'static'), r['case'], r['path'], r['precision'],
              f"{r['steps_per_s']:.3f}", f"{r['samples_per_s']:.1f}", f"{r['step_ms']:.1f}",
              f"{r['data_ms']:.1f}", f"{r['model_ms']:.1f}",
              f"{r['unwaited_ms']:.1f}" if 'unwaited_ms' in r else '', f"{r['cpu_ms']:.1f}",
              f"{r['peak_memory_mib']:.0f}",
              f"{r['target_tokens']}/{r['source_tokens']}", f"{r['target_tokens_run']:.1f}",
              '' if r['first_loss'] is None else f"{r['first_loss']:.5f}",
              *(f'{r[key]:.2f}x' if key in r else '' for key in ('speedup', 'cpu_speedup'))]
             for r in rows]
    return format_table(header, cells)


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """One line per xmr row (speed-up and its target), then the paper's schedule projected."""
    lines = []
    for row in rows:
        if split_path(row['path'])[0] not in ('xmr', *COMPILED_PATHS.values()):
            continue
        method = row.get('method', 'static')
        if 'speedup' not in row:  # its baseline row failed (said with the failures)
            lines.append(f"{method} {row['case']} {row['precision']}: {row['path']} has no "
                         f'{PATHS[method][0]} row to compare with')
            continue
        target = TARGETS.get((method, row['case']))
        against = [(PATHS[method][0], row['speedup'])] + (
            [('recompute', row['recompute_speedup'])] if 'recompute_speedup' in row else [])
        verdict = '' if target is None else f' (target >= {target:.0f}x: ' + ', '.join(
            f"{'met' if speedup >= target else 'NOT met'} against the {path} path"
            for path, speedup in against) + ')'
        also = ''.join(f', {speedup:.2f}x the {path} path' for path, speedup in against[1:])
        loss = ('' if 'loss_rel_diff' not in row
                else f", first-step loss differs by {row['loss_rel_diff']:.1e} (relative)")
        # An eval sample carries two captions (English and German) beside its image.
        captions = 2 * row['batch_size']
        rate = (f", {1000 * captions / row['step_ms']:.0f} captions/s "
                f"({1000 * captions / row['model_ms']:.0f} with the data path in workers)"
                if row['case'] == 'eval' else
                f", {row['step_ms']:.1f} ms/step ({row['model_ms']:.1f} ms with the data path "
                f"in workers, {row['unwaited_ms']:.1f} ms if the host never waited for the "
                'device' + (f" (it still waited at {', '.join(row['waits'])})"
                            if row['waits'] else '') + ')')
        lines.append(f"{method} {row['case']} {row['precision']}: {row['path']} is "
                     f"{row['speedup']:.2f}x "
                     f"the {PATHS[method][0]} path ({row['cpu_speedup']:.2f}x in CPU time)"
                     f"{also}{rate}{verdict}{loss}")
        lines.append(f'    {parts_text(row)}')
    return lines + projected_schedule(rows)


def parts_ms_text(parts_ms: dict[str, float]) -> str:
    """Parts in ms as printed: ``'data 1.00, forward 2.50'``."""
    return ', '.join(f'{name} {ms:.2f}' for name, ms in parts_ms.items())


def parts_text(row: dict[str, Any]) -> str:
    """A row's fastest step by part, as its summary and its details print it."""
    return f"its fastest step by part, ms: {parts_ms_text(row['parts_ms'])}"


def row_details(row: dict[str, Any]) -> str:
    """What a row's line leaves to the table, printed as the row ends (a run cut before its
    table still has them): tokens, the step without the data path and unwaited, its parts."""
    unwaited = (f", {row['unwaited_ms']:.2f} ms unwaited"
                + (f" (waits at {', '.join(row['waits'])})" if row['waits'] else '')
                if 'unwaited_ms' in row else '')
    return (f"tokens tgt/en {row['target_tokens']}/{row['source_tokens']}, "
            f"model {row['model_ms']:.2f} ms{unwaited}; {parts_text(row)}")


def check_profile_path(args: argparse.Namespace) -> None:
    """``--profile`` is a Markdown file, which each row appends to, and not ``--out``: appended
    to a result or a checkpoint, the profile made it unreadable.

    Raises:
        UserError: naming the file and the fix.
    """
    from xmr.fileio import input_written_over

    where = f'{args.profile} (--profile)'
    if Path(args.profile).suffix != '.md':
        raise UserError(where, 'each row appends Markdown to it', 'give a path ending in .md')
    if args.out is not None and input_written_over(args.profile, [args.out]) is not None:
        raise UserError(where, 'is also --out, which the rows replace', 'give another .md path')
    given_output(args.profile, '--profile', 'give a writable .md path')


def write_results(args: argparse.Namespace, device: str, rows: list[dict[str, Any]]) -> None:
    from xmr.fileio import atomic_write_text

    atomic_write_text(args.out, json.dumps(dict(
        arch=args.arch, device=device, batch_size=args.batch_size, frames=args.frames,
        steps=args.steps, warmup=args.warmup, rows=rows), indent=2))


def projected_schedule(rows: list[dict[str, Any]]) -> list[str]:
    """Wall time of the paper's 45k + 6k steps at each row's step time (both cases measured)."""
    steps: dict[tuple, dict[str, float]] = {}
    for row in rows:
        if row['case'] in PAPER_STEPS:
            key = (row.get('method', 'static'), row['path'], row['precision'],
                   row.get('batch_size'))
            steps.setdefault(key, {})[row['case']] = row['step_ms']
    lines = []
    for (method, path, precision, batch), times in steps.items():
        if len(times) == len(PAPER_STEPS):
            hours = sum(PAPER_STEPS[c] * times[c] for c in PAPER_STEPS) / 3.6e6
            lines.append(f'{method} {path} {precision}: the paper\'s 45k + 6k steps at batch '
                         f'{batch} would take {hours:.2f} h')
    return lines


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return []
    import torch

    from xmr.registry import TOKENIZERS

    with tempfile.TemporaryDirectory() as scratch:
        work_dir = Path(args.work_dir or scratch)
        work_dir.mkdir(parents=True, exist_ok=True)
        sp_model = str(work_dir / 'target_sp.model')
        # Trained once here, read by every row.
        TOKENIZERS.build(model_cfg(args.arch, None, False, sp_model,
                                   tokenizer_file=args.tokenizer_file)['language_branch']
                         ['tokenizer'])
        common = dict(device=args.device, arch=args.arch, batch_size=args.batch_size,
                      steps=args.steps, warmup=args.warmup, frames=args.frames,
                      threads=args.threads, sp_model=sp_model, work_dir=str(work_dir),
                      tokenizer_file=args.tokenizer_file, profile=args.profile)
        threads = args.threads or torch.get_num_threads()
        device = args.device if args.device != 'cpu' else f'cpu ({threads} threads)'
        rows, failed = [], []
        for spec in rows_to_run(args):
            spec = dict(common, **spec)
            started = time.perf_counter()
            name = f"{spec['method']} {spec['case']} {spec['path']} {spec['precision']}"
            try:
                row = run_one(spec) if args.in_process else run_in_subprocess(spec)
            except Exception:  # noqa: BLE001 - a failed row is reported; the others still run
                print(f'benchmark row {name} failed:\n{traceback.format_exc()}', flush=True)
                failed.append(name)
                continue
            compiled = ('' if 'graphs' not in row else
                        f"  compiled: first step {row['first_step_s']:.0f} s, "
                        + ', '.join(f'{row[k]} {k}' for k in ('graphs', 'graph_breaks',
                                                             'recompiles', 'cudagraph_skips')))
            print(f"{row['method']:<7} {row['case']:<14} {row['path']:<11} {row['precision']:<5} "
                  f"{row['step_ms']:9.2f} ms/step {row['peak_memory_mib']:8.0f} MiB  first loss "
                  f"{row['first_loss']}  ({time.perf_counter() - started:.0f} s){compiled}",
                  flush=True)
            print(f'    {row_details(row)}', flush=True)
            rows.append(row)
            if args.out:  # each row kept as it comes: a run cut short loses none
                write_results(args, device, with_ratios(rows))
    rows = with_ratios(rows)
    print(f'\n{args.arch}, batch {args.batch_size}, {args.frames} frames per video, '
          f'{args.steps} timed steps after {args.warmup} warm-up, device {device}\n')
    print(results_table(rows, args.device))
    print('\n' + '\n'.join(summary(rows)))
    if failed:
        raise SystemExit(f'{len(failed)} benchmark rows failed (their errors are above): '
                         + '; '.join(failed))
    return rows


if __name__ == '__main__':
    os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')
    run_tool(main)
