"""The phased training loop: ordered alignment phases on one global iteration counter."""
from __future__ import annotations

import functools
import os
import os.path as osp
from collections.abc import Iterator, Mapping, Sequence, Sized
from typing import Any

import torch
from mmengine.dist import get_world_size
from mmengine.runner.base_loop import BaseLoop
from torch.utils.data import DataLoader

from xmr.datasets.held_out import check_held_out
from xmr.engine.data_languages import (
    check_data_languages,
    check_gallery_sizes,
    check_media_sizes,
    unfed_languages,
)
from xmr.engine.distributed import padded_repeats, rewrap_for_phase, shared_seed
from xmr.engine.divergence import DivergenceMonitor, nonfinite_terms
from xmr.engine.epoch_counts import (
    batches_per_epoch,
    check_epochs,
    is_epochs,
    iterations_in,
    resolve_count,
    resolved_text,
)
from xmr.engine.eval_loops import check_media_exist, expected_metric_keys, scored_loaders
from xmr.engine.feature_cache import prepare_feature_caches
from xmr.engine.feature_cache.dataset import source_dataset
from xmr.engine.hook_points import call_failure_point, call_hook_point, call_while_failing
from xmr.engine.hooks.checkpoint import check_metric_names
from xmr.engine.hooks.preemption import (
    end_persistent_workers,
    preemption_signals,
    workers_ignore,
)
from xmr.engine.optim import parameter_counts
from xmr.engine.optim_wrapper import OptimWrapper
from xmr.engine.phase_best import PhaseBest
from xmr.engine.phases import Phase, check_phase_names, phase_lr_factor, under_prefix
from xmr.engine.pinned_batches import pinned_on_gpu
from xmr.engine.resume import (
    can_skip_at_sampler,
    pass_indices,
    refuse_endless_sampler,
    reseed_samplers,
    restart_iteration_timers,
    skip_at_sampler,
)
from xmr.engine.rng import preserved_rng_state, restore_rng_state
from xmr.engine.worker_tokens import tokenize_in_workers
from xmr.engine.wrappers import unwrap_model
from xmr.evaluation.leaderboard import format_table
from xmr.models.retrievers.base import DISENTANGLER_SCALE
from xmr.registry import LOOPS
from xmr.utils.cli import did_you_mean


def resolve_dataloader_key(cfg: Mapping[str, Any], key: str, phase_name: str) -> Mapping:
    """The dataloader config that a phase names by its top-level config key.

    Args:
        cfg: the whole config (the runner's ``cfg``).
        key: a top-level key of ``cfg`` holding a dataloader dict, e.g. ``'text_train_dataloader'``.
        phase_name: the phase asking, named in the error.

    Raises:
        ValueError: ``key`` holds no dataloader dict; the message lists the keys that do, and
            the nearest to a misspelt ``key``.
    """
    loader = cfg.get(key)
    if not isinstance(loader, Mapping):
        known = sorted(k for k, v in cfg.items() if k.endswith('dataloader')
                       and isinstance(v, Mapping))
        raise ValueError(f"phase {phase_name}: dataloader '{key}' is no dataloader of the "
                         f'config{did_you_mean(key, known)}; the config has {known}')
    return loader


def refuse_param_scheduler(param_scheduler: Any) -> None:
    """Refuse an MMEngine ``param_scheduler``: the loop sets every group's learning rate from
    its phase before each iteration, so a scheduler's values would be overwritten unseen.

    Raises:
        ValueError: naming the scheduler and the phase keys that schedule instead.
    """
    if param_scheduler is None or param_scheduler == []:
        return
    raise ValueError(f'param_scheduler={param_scheduler!r}: PhasedTrainLoop sets the learning '
                     'rate of every iteration from its phase, overwriting what a scheduler '
                     'sets; give param_scheduler = None and schedule in train_cfg.phases '
                     '(lr, schedule, warmup_ratio, min_lr_ratio, lr_mult)')


def _check_validation_options(val_interval: Any, validate_at_phase_end: Any) -> None:
    # Checked here: a wrong type would fail at the first step's modulo, naming no key.
    if is_epochs(val_interval):
        check_epochs('train_cfg.val_interval', val_interval)
    elif isinstance(val_interval, bool) or not isinstance(val_interval, int) or val_interval < 0:
        raise ValueError(f'train_cfg.val_interval={val_interval!r} must be an integer >= 0 '
                         '(0: validate at phase ends only), or dict(epochs=E)')
    if not isinstance(validate_at_phase_end, bool):
        raise ValueError(f'train_cfg.validate_at_phase_end={validate_at_phase_end!r} must '
                         'be True or False')


def _configured_phase(runner, index: int, cfg: dict, dataloader: DataLoader | dict | None
                      ) -> tuple[Phase, str]:
    """Phase ``index`` of ``train_cfg.phases``, its dataloader resolved: a config key to the
    config it names, read through a feature cache where the phase asks, pinned on a GPU; and
    that dataloader's name (:func:`phase_loader_name`), which the resolved phase no longer has."""
    phase = Phase.from_config(index, cfg)
    loader_name = phase_loader_name(phase)
    if isinstance(phase.dataloader, str):
        phase.dataloader = resolve_dataloader_key(runner.cfg, phase.dataloader, phase.name)
    if phase.cache_features:
        loader = dataloader if phase.dataloader is None else phase.dataloader
        if not isinstance(loader, Mapping):
            raise ValueError(f'phase {phase.name}: cache_features needs its dataloader '
                             f'as a config, got a built {type(loader).__name__}')
        phase.dataloader = with_feature_cache(loader, phase, runner.work_dir, loader_name)
    if isinstance(phase.dataloader, Mapping):
        phase.dataloader = pinned_on_gpu(phase.dataloader)
    return phase, loader_name


def _train_dataloader(runner, dataloader: DataLoader | dict | None,
                      phases: Sequence[Phase]) -> DataLoader:
    """The runner's train dataloader, built: the one given, else the first phase's own (which
    only a run whose every phase has its own may lack)."""
    if dataloader is None and any(p.dataloader is None for p in phases):
        raise ValueError('a phase without its own dataloader needs train_dataloader')
    if dataloader is None:
        dataloader = phases[0].dataloader
    if isinstance(dataloader, Mapping):
        # With the run's seed on every rank, as the phases' own: MMEngine's build under
        # diff_rank_seed gives the sampler a random seed, which a resumed run cannot repeat.
        dataloader = runner.build_dataloader(pinned_on_gpu(dataloader), seed=shared_seed(runner))
    return dataloader


def _phase_header(phase: Phase, model: torch.nn.Module) -> str:
    """The log's lines at a phase's start: its span, rate, losses, trainable prefixes, and the
    model's trainable and total parameters per module group."""
    counts = parameter_counts(model)
    rows = [[group, f'{trainable:,}', f'{total:,}'] for group, (trainable, total) in counts.items()]
    rows.append(['all', f'{sum(c[0] for c in counts.values()):,}',
                 f'{sum(c[1] for c in counts.values()):,}'])
    return (f'phase {phase.name}: iterations {phase.start}-{phase.end}, lr {phase.lr}, '
            f'losses {_losses_run(phase, model)}, trainable {list(phase.trainable)}\n'
            + format_table(['module group', 'trainable', 'total'], rows))


def _losses_run(phase: Phase, model: torch.nn.Module) -> str:
    """The phase's loss weights as the model runs them (its ``set_phase``'s), naming those of
    the config it drops: a zero weight, or the disentangler's scale on a model without one or
    whose disentangler computes no term."""
    run = getattr(model, 'loss_weights', phase.loss_weights)
    dropped = {name: weight for name, weight in phase.loss_weights.items() if name not in run}
    if not dropped:
        return str(run)
    has = ('no disentangler' if getattr(model, 'disentangler', None) is None
           else 'a disentangler with every term switched off')
    why = (f"; the model has {has} for 'disentangler' to scale"
           if dropped.get(DISENTANGLER_SCALE) else '')
    return f'{run} (not run: ' + ', '.join(f'{name}={weight:g}' for name, weight
                                            in dropped.items()) + f'{why})'


def _refuse_cache_of_trained_backbone(phase: Phase, names: Sequence[str]) -> None:
    """Refuse ``cache_features`` on a phase that trains a backbone parameter (of ``names``),
    whichever of its ``trainable`` entries (a module, a model's group) reaches it.

    Raises:
        ValueError: naming the phase and the ``trainable`` prefix: cached features would be
            stale after one step.
    """
    prefix = next((prefix for prefix in phase.trainable for name in names
                   if under_prefix(name, 'backbone') and under_prefix(name, prefix)), None)
    if prefix is not None:
        raise ValueError(f'phase {phase.name}: cache_features with a trainable backbone '
                         f'({prefix}): its features change every step; drop cache_features '
                         'for this phase')


def phase_loader_name(phase: Phase) -> str:
    """The config key of a phase's dataloader, or the phase's name for one written inline."""
    if phase.dataloader is None:
        return 'train_dataloader'
    return phase.dataloader if isinstance(phase.dataloader, str) else phase.name


def with_feature_cache(loader: Mapping[str, Any], phase: Phase, work_dir: str | os.PathLike,
                       loader_name: str) -> dict[str, Any]:
    """A phase's dataloader config with its dataset read through a feature cache.

    By default the cache belongs to the run: it lives in the work directory, one per dataloader
    (phases reading the same loader share it), and is rebuilt rather than refused when stale (a
    phase in between trained the towers). A ``cache_dir`` in the options may be shared with
    other runs: a stale one is refused (:class:`~xmr.engine.feature_cache.StaleFeatureCacheError`)
    unless the options also say ``rebuild_if_stale=True``.

    Args:
        loader: the phase's dataloader config (with a ``dataset`` config).
        phase: the phase; its ``cache_features`` (``True`` or a dict of
            :class:`~xmr.engine.feature_cache.CachedFeatureDataset` options) and ``trainable``
            are read.
        work_dir: the run's work directory; the cache goes to
            ``<work_dir>/feature_cache/<loader_name>`` unless the options name ``cache_dir``.
        loader_name: the config key of the loader (``'train_dataloader'``,
            ``'text_train_dataloader'``), or the phase's name for a loader written in the phase.

    A phase that trains the backbone is refused once its ``trainable`` groups are resolved
    (:meth:`PhasedTrainLoop._check_phases_against_model`).

    Raises:
        ValueError: the loader has no dataset config, or it is cached already.
    """
    dataset = loader.get('dataset')
    if not isinstance(dataset, Mapping):
        raise ValueError(f'phase {phase.name}: cache_features needs a dataloader config with a '
                         'dataset config')
    if dataset.get('type') == 'CachedFeatureDataset':
        raise ValueError(f'phase {phase.name}: its dataset is a CachedFeatureDataset already; '
                         'drop cache_features or the wrapper')
    options = dict(phase.cache_features) if isinstance(phase.cache_features, Mapping) else {}
    if 'cache_dir' not in options:
        # A cache_dir the user names may be shared with other runs, which a rebuild would
        # change under them: only the run's own cache is rebuilt when stale by default.
        options['cache_dir'] = osp.join(str(work_dir), 'feature_cache', loader_name)
        options.setdefault('rebuild_if_stale', True)
    return dict(loader, dataset=dict(type='CachedFeatureDataset', dataset=dict(dataset),
                                     **options))


def batching_record(dataloader: Any) -> dict[str, int | None]:
    """What decides which items a phase's ``n``-th batch holds: the global batch (a process's
    batch times the processes, so a run resumed on other GPUs with the same global batch
    reads on) and the items and batches of a pass (``None`` where the loader tells none)."""
    batch_sampler = getattr(dataloader, 'batch_sampler', None)
    batch_size = getattr(batch_sampler, 'batch_size', getattr(dataloader, 'batch_size', None))
    dataset = getattr(dataloader, 'dataset', None)
    return dict(global_batch=None if batch_size is None else batch_size * get_world_size(),
                items=len(dataset) if isinstance(dataset, Sized) else None,
                batches=len(dataloader) if isinstance(dataloader, Sized) else None)


def _batching_key(phase: Phase) -> str:
    """The message-hub key of ``phase``'s :func:`batching_record`."""
    return f'phase_batches/{phase.name}'


def _no_batch_error(phase: Phase) -> ValueError:
    return ValueError(f'phase {phase.name}: its dataloader yields no batch per epoch (fewer '
                      'items than batch_size with drop_last?)')


class _InfiniteIterator:
    """Cycles a dataloader forever, setting the sampler's epoch at each pass.

    Started at batch ``start`` of the cycle (a phase resumed in its middle), it sets the epoch
    of the pass holding that batch and skips the batches before it in that pass at the sampler
    (:func:`~xmr.engine.resume.skip_at_sampler`): no skipped item is read or collated, and what
    follows is what the uninterrupted run drew. Every phase counts its passes from epoch 0, so
    a phase's order does not depend on how many passes an earlier phase made over a shared
    loader (which a resumed run could not know).
    """

    def __init__(self, dataloader: DataLoader, start: int = 0) -> None:
        self.dataloader = dataloader
        pass_indices(dataloader)  # keys each index with its pass, which decides its draws
        self.epoch, within = divmod(start, len(dataloader)) if start else (0, 0)
        self._set_epoch()
        if within:
            skip_at_sampler(dataloader, within)
        self._iterator = self._start_pass()

    def _set_epoch(self) -> None:
        # A batch sampler plans its passes itself (torch then gives the loader a plain sampler).
        for sampler in (getattr(self.dataloader, 'sampler', None),
                        getattr(self.dataloader, 'batch_sampler', None)):
            if hasattr(sampler, 'set_epoch'):
                sampler.set_epoch(self.epoch)

    def _start_pass(self) -> Iterator:
        # A pass draws its seed from torch's stream as it starts, unless the loader's persistent
        # workers go on from an earlier pass: a resumed run, whose workers start anew where the
        # uninterrupted run's went on (or the reverse), would draw other numbers after it.
        with preserved_rng_state():
            return iter(self.dataloader)

    def __next__(self) -> Any:
        try:
            return next(self._iterator)
        except StopIteration:
            self.epoch += 1
            self._set_epoch()
            self._iterator = self._start_pass()
            return next(self._iterator)


def built_frozen(model: torch.nn.Module) -> frozenset[str]:
    """The parameters ``model`` was built with frozen (``requires_grad=False``) outside its
    ``backbone``: a fixed part of a module of one's own (an adapter's random projections, as
    VeRA's; a frozen encoder inside a disentangler), which no phase trains. The backbone's are
    frozen by :meth:`~xmr.models.backbones.TextBackbone.freeze` until a phase names them."""
    return frozenset(name for name, p in model.named_parameters()
                     if not p.requires_grad and not under_prefix(name, 'backbone'))


def frozen_eval_modules(model: torch.nn.Module, trainable: Sequence[str]
                        ) -> list[torch.nn.Module]:
    """The modules of ``model`` that a phase with ``trainable`` prefixes keeps in eval mode:
    its batch norms and its backbone's modules that the phase leaves frozen.

    In training mode a batch norm updates its running statistics, buffers no optimiser
    touches: a frozen tower with them (open_clip's ResNet image towers) would change while a
    phase trains something else. A frozen backbone runs as in ``eval()`` altogether: a tower of
    one's own that calls a library's modules (a Hugging Face encoder's dropout, open_clip's
    patch dropout) would otherwise encode ``r^S`` / ``r^V`` with dropout, which xmr's
    written-out towers never apply. A module trains when it lies under a ``trainable`` prefix
    or one of its parameters does.

    Returns:
        The outermost such modules, in the model's order (a frozen backbone is one entry).
    """
    def trained(name: str) -> bool:
        return any(under_prefix(name, p) or p.startswith(name + '.') for p in trainable)

    def kept_in_eval(name: str, module: torch.nn.Module) -> bool:
        return (isinstance(module, torch.nn.modules.batchnorm._BatchNorm)
                or under_prefix(name, 'backbone'))

    kept: dict[str, torch.nn.Module] = {}
    for name, module in model.named_modules():
        # A kept module's eval() covers its submodules; the loop checks its flag alone.
        if kept_in_eval(name, module) and not trained(name) and \
                not any(name.startswith(above + '.') for above in kept):
            kept[name] = module
    return list(kept.values())


def ensure_train_mode(model: torch.nn.Module,
                      modules: list[torch.nn.Module] | None,
                      frozen_norms: Sequence[torch.nn.Module] = ()) -> list[torch.nn.Module]:
    """Put ``model`` in training mode before an iteration, as MMEngine's loops do, but for its
    ``frozen_norms`` (:func:`frozen_eval_modules`), which stay in eval mode. ``model.train()``
    is called only when one of ``modules`` is out of that mode (validation, a hook's
    ``eval()``), one of ``frozen_norms`` is in it, or ``modules`` is ``None`` (a new phase, a
    re-wrapped model).

    With every module in training mode the call would change nothing, and it walks the module
    tree through ``nn.Module.__setattr__``: 1.9 to 3.2 ms of the host's time an iteration for
    DASD at ViT-B/32 (475 modules) on the development CPU, where reading their flags takes
    0.04 ms.

    Args:
        model: the model the iteration trains.
        modules: what this function returned for ``model`` last, or ``None``.
        frozen_norms: modules of ``model`` to keep in eval mode.

    Returns:
        The model's modules in training mode, for the next call.
    """
    if (modules is None or not all(module.training for module in modules)
            or any(norm.training for norm in frozen_norms)):
        model.train()
        for norm in frozen_norms:
            norm.eval()
        modules = [module for module in model.modules() if module.training]
    return modules


def read_to_host(outputs: Mapping[str, Any], norm: torch.Tensor | None = None
                 ) -> tuple[dict[str, Any], torch.Tensor | None]:
    """The iteration's one read of the device: every one-element tensor of ``outputs`` (the
    logged losses) and the gradients' ``norm``, copied to the host in one copy.

    Read one by one, each value would be its own copy and wait (``float()`` in the non-finite
    check, ``.item()`` in MMEngine's ``RuntimeInfoHook``, the norm's log); on a GPU each is a
    synchronisation. The copies keep their dtypes and shapes, so hooks still receive tensors.

    Returns:
        ``outputs`` with each such tensor replaced by its host copy, and the norm's copy.
    """
    names = [name for name, value in outputs.items()
             if isinstance(value, torch.Tensor) and value.numel() == 1]
    tensors = [outputs[name] for name in names] + ([] if norm is None else [norm])
    if not tensors:
        return dict(outputs), norm
    # A dtype that holds every value exactly (fp32 holds bf16 and fp16; fp64 where one is).
    dtype = functools.reduce(torch.promote_types, (t.dtype for t in tensors), torch.float32)
    device = tensors[0].device
    values = torch.stack([t.detach().reshape(()).to(device, dtype) for t in tensors]).cpu()
    copies = [value.to(t.dtype).reshape(t.shape) for value, t in zip(values, tensors)]
    return dict(outputs, **dict(zip(names, copies))), None if norm is None else copies[-1]


@LOOPS.register_module()
class PhasedTrainLoop(BaseLoop):
    """Runs the configured phases in order on one global iteration counter.

    A phase may name its dataloader by a top-level config key and give its length in
    ``epochs``; both resolve when the loop is built, before anything trains, so the global
    iteration counter, phase boundaries and resume see plain iteration counts.
    At the start of a phase the loop selects the model's losses (``set_phase``), freezes every
    parameter outside ``trainable`` (and keeps the batch norms and the backbone there in eval
    mode: :func:`frozen_eval_modules`), re-wraps the model for DDP over exactly those parameters
    (:func:`~xmr.engine.distributed.rewrap_for_phase`), clears the optimiser state (phases
    train independently, as in DASD), builds the phase's dataloader and prepares its feature
    caches (:func:`~xmr.engine.feature_cache.prepare_feature_caches`). Every iteration sets
    each parameter group's learning rate from the phase's own warm-up + decay, so no scheduler
    stacks on another.
    Hooks, checkpoints and resume see one ``iter`` counter: a run resumed in the middle of
    phase 2 re-enters phase 2, skips the batches it trained on at the sampler (none is read),
    restores the RNG state of the checkpoint (saved by :class:`~xmr.engine.hooks.RNGStateHook`)
    and keeps the optimiser state it loaded (warning when the checkpoint had none).
    Everything that can be checked before a step is: phase values when the loop is built
    (:meth:`Phase.from_config`), ``lr_mult`` groups and the data's languages when ``run``
    starts. A non-finite loss stops training before the iteration's hooks run
    (:class:`~xmr.engine.divergence.DivergenceMonitor`). Reading the losses for that check is
    the step's one wait for the device, and its one copy to the host: the losses and the
    gradients' norm that xmr's optimiser wrappers keep
    (:class:`~xmr.engine.optim_wrapper.OptimWrapper`) come together (:func:`read_to_host`), and
    the check, the norm's log and the hooks read the host's copies.

    Args:
        runner: the MMEngine runner.
        dataloader: the runner's ``train_dataloader`` (config or object); phases without their
            own dataloader use it.
        phases: list of :class:`Phase` fields as dicts.
        val_interval: validate every this many global iterations (0: only at phase ends), or
            ``dict(epochs=E)``: every ``E`` passes over ``dataloader``, resolved here
            (:mod:`xmr.engine.epoch_counts`), as is a hook's ``interval`` given so.
        validate_at_phase_end: validate after the last step of each phase.
        nonfinite_patience: consecutive iterations with a NaN or infinite loss tolerated
            before training stops with :class:`~xmr.engine.divergence.TrainingDivergedError`
            (0: at the first). Such an iteration reaches no hook (it is neither logged into the
            window, saved nor validated) and a phase may not end on one. Above 0 it needs an
            optimiser step that skips a step with non-finite gradients (checked when ``run``
            starts).
        allow_eval_overlap: let validation galleries share media files with the phases' data
            (a deliberate debugging run); by default such a run is refused before any step
            (:func:`~xmr.datasets.held_out.check_held_out`), as its scores would be on media
            the model trained on. A test of the config (``tools/test.py``, ``--test``) reads it
            too, for its test galleries (:func:`~xmr.datasets.held_out.check_test_held_out`).
    """

    def __init__(self, runner, dataloader: DataLoader | dict | None, phases: Sequence[dict],
                 val_interval: int | dict = 0, validate_at_phase_end: bool = True,
                 nonfinite_patience: int = 0, allow_eval_overlap: bool = False) -> None:
        if not phases:
            raise ValueError('PhasedTrainLoop needs at least one phase')
        _check_validation_options(val_interval, validate_at_phase_end)
        refuse_param_scheduler(getattr(runner, 'param_schedulers', None))
        configured = [_configured_phase(runner, index, cfg, dataloader)
                      for index, cfg in enumerate(phases)]
        self.phases = [phase for phase, _ in configured]
        check_phase_names(self.phases)
        # What errors call each phase's data: its config key, or the phase's name for its own.
        self._loader_names = [name for _, name in configured]
        super().__init__(runner, _train_dataloader(runner, dataloader, self.phases))
        shared = next((index for index, phase in enumerate(self.phases)
                       if phase.dataloader is None), None)
        if shared is not None:
            self._refuse_endless_sampler(shared, self.dataloader)
        # The seed the loaders built here take: MMEngine resumes after building the loop, with
        # the checkpoint's seed (_reseed_built_samplers).
        self._seed_at_build = shared_seed(runner)
        # Phases' own dataloaders, built before training (to count an epochs-phase's batches,
        # to check languages) and kept until the phase uses them.
        self._built_dataloaders: dict[int, DataLoader] = {}
        self.divergence = DivergenceMonitor(nonfinite_patience)
        self._max_iters = self._lay_out_phases()
        self.val_interval = self._in_iterations('train_cfg.val_interval', val_interval)
        self._hook_intervals_in_iterations()
        self.validate_at_phase_end = validate_at_phase_end
        self.allow_eval_overlap = allow_eval_overlap
        self._iter = 0
        self._epoch = 0
        self.current_phase: Phase | None = None
        # The model's modules when it was last put in training mode (ensure_train_mode).
        self._trained_modules: list[torch.nn.Module] | None = None
        # The current phase's modules kept in eval mode (frozen_eval_modules).
        self._frozen_norms: list[torch.nn.Module] = []
        self.pending_rng_state: dict[str, Any] | None = None
        self.stop_training = False
        self.phase_best = PhaseBest(self.phases)
        self._built_frozen = built_frozen(self.model)
        self._check_phases_against_model()
        self._warn_of_fixed_loss_parameters()

    # MMEngine reads these.
    @property
    def max_iters(self) -> int:
        return self._max_iters

    @property
    def max_epochs(self) -> int:
        return 1

    @property
    def iter(self) -> int:
        return self._iter

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def model(self) -> torch.nn.Module:
        model = self.runner.model
        return unwrap_model(model)

    def _lay_out_phases(self) -> int:
        """Place the phases end to end on the global iteration counter, the length of one in
        epochs resolved first (:meth:`_resolve_epochs`).

        Returns:
            The iterations of all the phases.
        """
        start = 0
        for index, phase in enumerate(self.phases):
            if phase.epochs is not None:
                self._resolve_epochs(index, phase)
            phase.start = start
            start = phase.end
        return start

    def _hook_intervals_in_iterations(self) -> None:
        """A hook's ``interval`` given in epochs, in iterations (:meth:`_in_iterations`)."""
        for hook in self.runner.hooks:
            if is_epochs(getattr(hook, 'interval', None)):
                hook.interval = self._in_iterations(f'{type(hook).__name__}.interval',
                                                    hook.interval)

    def _resolve_epochs(self, index: int, phase: Phase) -> None:
        """Sets ``phase.iters`` to ``epochs x len(dataloader)``.

        ``len`` of the built DataLoader counts what one pass yields: it respects ``drop_last``
        and, under DDP, is the per-rank count of the distributed sampler (equal on all ranks).
        """
        batches = batches_per_epoch(self._phase_dataloader(index), f'phase {phase.name}')
        if batches == 0:
            raise _no_batch_error(phase)
        phase.iters = iterations_in(f'phase {phase.name}', phase.epochs, batches)
        self.runner.logger.info(
            f'phase {phase.name}: {resolved_text(phase.epochs, phase.iters, batches)}')

    def _in_iterations(self, where: str, count: int | dict) -> int:
        """``count`` in iterations; one in epochs counts passes over the runner's train
        dataloader (:func:`~xmr.engine.epoch_counts.resolve_count`), logged."""
        iterations = resolve_count(where, count, self.dataloader)
        if iterations is not count:
            self.runner.logger.info(
                f"{where}: {resolved_text(count['epochs'], iterations, len(self.dataloader))}")
        return iterations

    def _phase_dataloader(self, index: int) -> DataLoader:
        """A phase's built dataloader: the runner's, or the phase's own, built once."""
        phase = self.phases[index]
        if phase.dataloader is None:
            return self.dataloader
        if index not in self._built_dataloaders:
            dataloader = self.runner.build_dataloader(phase.dataloader,
                                                      seed=shared_seed(self.runner))
            self._refuse_endless_sampler(index, dataloader)
            self._built_dataloaders[index] = dataloader
        return self._built_dataloaders[index]

    def _refuse_endless_sampler(self, index: int, dataloader: DataLoader) -> None:
        """Refuse phase ``index``'s built dataloader if its passes have no known end
        (:func:`~xmr.engine.resume.refuse_endless_sampler`)."""
        refuse_endless_sampler(dataloader, f'phase {self.phases[index].name}: its dataloader '
                                           f'({self._loader_names[index]})')

    def _reseed_built_samplers(self) -> None:
        """Give the samplers of the loaders built with the loop the seed the run trains with.

        MMEngine builds the loop, its ``train_dataloader`` and the loaders an epochs-phase
        counts, before it resumes, with ``randomness.seed`` (a random one for ``None``); the
        resumed run trains with its checkpoint's seed, and its passes must be those of the
        run that wrote it. Loaders built later take that seed as they are built.
        """
        seed = shared_seed(self.runner)
        if seed != self._seed_at_build:
            for dataloader in (self.dataloader, *self._built_dataloaders.values()):
                reseed_samplers(dataloader, self._seed_at_build, seed)

    def _warn_of_padding(self, phase: Any, loader_name: str, dataloader: Any) -> None:
        """Say where a DDP pass trains some items twice (:func:`padded_repeats`): its steps are
        then not those of one process with the global batch (docs/distributed.md)."""
        repeats = padded_repeats(dataloader)
        if repeats:
            processes = dataloader.sampler.world_size
            self.runner.logger.warning(
                f'phase {phase.name}: {loader_name} pads each pass of its '
                f'{len(dataloader.dataset)} items to a multiple of the {processes} processes '
                f'(DefaultSampler), so {repeats} of its items {"is" if repeats == 1 else "are"} '
                'trained twice a pass; '
                "batch_sampler=dict(type='GlobalBatchSampler') (languages mixed) or "
                "dict(type='LanguageBatchSampler') reads global batches without padding")

    def _check_before_training(self) -> None:
        """What the optimiser and the built data must agree on, checked before any step.

        Every ``lr_mult`` names a parameter group of the optimiser (built after the loop), a
        tolerated non-finite iteration leaves the weights as they were (:meth:`_check_patience`),
        each phase still to run has a batch (else refused only as the phase begins, after the
        phases before it trained), and the model reads every caption language of those phases
        and of validation, whose media files exist (``check_media_exist`` of the datasets that
        read files) at the size its image tower takes and, unless ``allow_eval_overlap``, are
        held out of the phases' data (``check_held_out``); the metric each ``start_from_best``
        names is one the validation will report.
        """
        self._rename_legacy_validation_info()
        self._check_resumed_schedule()
        self._check_resumed_optimiser_settings()
        self._check_patience()
        self.phase_best.check_validated(self.runner.val_loop is not None, self.val_interval,
                                        self.validate_at_phase_end)
        self._check_optimizer_groups()
        phase_datasets = self._datasets_to_train()
        datasets = {**phase_datasets, **self._checked_val_datasets(phase_datasets)}
        check_data_languages(self.model, datasets)
        self._warn_of_unfed_languages(phase_datasets)
        check_media_sizes(unwrap_model(self.model), datasets)
        check_media_exist(datasets.values())

    def _rename_legacy_validation_info(self) -> None:
        """A checkpoint of an earlier xmr names its last validation 'validated_iter', a 'val...'
        info that MMEngine would print with every validation: keep it as
        'last_validation_iter'."""
        hub = self.runner.message_hub
        legacy = hub.runtime_info.pop('validated_iter', None)
        if legacy is not None:
            hub.runtime_info.setdefault('last_validation_iter', legacy)

    def _datasets_to_train(self) -> dict[str, Any]:
        """The datasets of the phases still to run, named for errors, each phase's dataloader
        checked on the way: it has a batch, a phase resumed in its middle reads the batches
        its checkpoint was trained on (:meth:`_check_resumed_batches`), and a padded pass is
        told once per dataloader (:meth:`_warn_of_padding`)."""
        datasets, padding_checked = {}, []
        for index, phase in enumerate(self.phases):
            if self._iter >= phase.end:
                continue
            dataloader = self._phase_dataloader(index)
            if hasattr(dataloader, '__len__') and len(dataloader) == 0:
                raise _no_batch_error(phase)
            if phase.start < self._iter:
                self._check_resumed_batches(phase, dataloader)
            if all(dataloader is not seen for seen in padding_checked):
                self._warn_of_padding(phase, self._loader_names[index], dataloader)
                padding_checked.append(dataloader)
            datasets[f'phase {phase.name} dataset ({self._loader_names[index]})'] = \
                dataloader.dataset
        return datasets

    def _checked_val_datasets(self, phase_datasets: Mapping[str, Any]) -> dict[str, Any]:
        """The validation's datasets, named for errors (none without a validation), checked
        against the training: held out of ``phase_datasets`` unless ``allow_eval_overlap``,
        scored by protocols the backbone can embed, galleries of their protocols' sizes, and
        every ``start_from_best`` a metric they report."""
        val_loop = self.runner.val_loop
        if val_loop is None:
            return {}
        val_datasets = {f'val dataset {i} ({type(loader.dataset).__name__})': loader.dataset
                        for i, (loader, _) in enumerate(scored_loaders(val_loop))}
        if not self.allow_eval_overlap:
            check_held_out(
                {where: source_dataset(data) for where, data in phase_datasets.items()},
                {where: source_dataset(data) for where, data in val_datasets.items()})
        self._check_val_protocols(val_loop)
        check_gallery_sizes(val_loop)
        expected = expected_metric_keys(val_loop)
        if expected is not None:
            check_metric_names([(f'train_cfg.phases.{index}.start_from_best',
                                 phase.start_from_best)
                                for index, phase in enumerate(self.phases)
                                if phase.start_from_best is not None], expected,
                               expected=True)
        return val_datasets

    def _warn_of_unfed_languages(self, phase_datasets: Mapping[str, Any]) -> None:
        """Warn, as a run starts, of the model's language modules that no phase's data
        trains (:func:`unfed_languages`)."""
        unfed = unfed_languages(unwrap_model(self.model), phase_datasets)
        if unfed and self._iter == 0:
            self.runner.logger.warning(
                f"the model has modules for {unfed}, which no phase's data holds "
                f"({', '.join(phase_datasets)}): no step trains them; give the phases' datasets "
                'those languages (target_langs), or drop them from the model '
                '(model.language_branch.languages)')

    def _check_val_protocols(self, val_loop) -> None:
        """A text-only backbone is validated by text-to-text retrieval: a metric whose protocol
        ranks media would fail only at the first validation, after ``val_interval`` steps.

        Raises:
            ValueError: naming the metric's protocol and the backbone.
        """
        from xmr.evaluation.protocols import PROTOCOLS
        from xmr.models.backbones.base import TextBackbone, VisionLanguageBackbone

        backbone = getattr(unwrap_model(self.model), 'backbone', None)
        if not isinstance(backbone, TextBackbone) or isinstance(backbone,
                                                                VisionLanguageBackbone):
            return
        for evaluator in getattr(val_loop, 'evaluators', None) or [val_loop.evaluator]:
            for metric in getattr(evaluator, 'metrics', []):
                protocol = PROTOCOLS.get(getattr(metric, 'protocol', None))
                if protocol is not None and not protocol.text_gallery:
                    raise ValueError(
                        f'val_evaluator {type(metric).__name__}(protocol={protocol.name!r}) '
                        f'ranks media, but {type(backbone).__name__} is a text-only backbone '
                        "that embeds none: validate it with protocol='text_to_text'")

    def _check_resumed_schedule(self) -> None:
        """A resumed run follows the schedule its checkpoint was trained under, up to its
        iteration; the phases after it may change (to extend a run).

        The schedule (each phase's name, iterations, trainable modules, losses and learning
        rate) travels in the message hub, which every checkpoint carries. Resumed at iteration
        ``N`` under another schedule for the phases begun by ``N``, the run would be a mix of
        two runs that neither config describes: another phase at ``N``, a learning-rate
        schedule bent in its middle.

        Raises:
            ValueError: naming the first phase that differs, both ways, and what to do.
        """
        hub = self.runner.message_hub
        schedule = [phase.schedule_record() for phase in self.phases]
        recorded = hub.get_info('phase_schedule')
        if recorded is not None and self._iter > 0:
            for position, before in enumerate(recorded):
                if before['start'] >= self._iter:
                    break  # not begun at the checkpoint: free to change
                now = schedule[position] if position < len(schedule) else None
                if now != before:
                    raise ValueError(
                        f'cannot resume at iteration {self._iter}: the checkpoint was trained '
                        f'with phase {position} = {before}, this config has {now}. Resume with '
                        "the config that wrote it (the work dir holds its dump), or start a new "
                        'run from its weights (load_from=..., without --resume)')
        hub.update_info('phase_schedule', schedule)

    def _check_resumed_optimiser_settings(self) -> None:
        """A phase resumed in its middle goes on under the optimiser settings it began with
        (``weight_decay``, ``betas``, ``eps``, its groups); a phase that begins at the resumed
        iteration takes the config's, which the resume kept
        (:class:`~xmr.engine.optim_wrapper.BuiltSettingsKept`), as it may change its schedule.

        Raises:
            ValueError: resumed inside a phase under settings of the config that its
                checkpoint was not trained with, naming the phase, each setting both ways and
                what to do.
        """
        changes = getattr(self.runner.optim_wrapper, 'resumed_setting_changes', ())
        if not changes:
            return
        inside = next((phase for phase in self.phases if phase.start < self._iter < phase.end),
                      None)
        if inside is not None:
            raise ValueError(
                f'cannot resume phase {inside.name} at iteration {self._iter}: its checkpoint '
                f'was trained with other optimiser settings than this config gives '
                f'({"; ".join(changes)}), and the phase would go on under settings it did not '
                'begin with. Resume with the config that wrote it (the work dir holds its dump) '
                'and its --cfg-options, or start a new run from its weights (load_from=..., '
                'without --resume)')
        self.runner.logger.info(
            f'resumed at iteration {self._iter}, where a phase begins: the optimiser takes the '
            f'config\'s settings, not its checkpoint\'s ({"; ".join(changes)})')

    def _check_patience(self) -> None:
        """Refuse ``nonfinite_patience`` where the optimiser's step does not skip a step whose
        gradients are not finite (the wrapper's ``skips_nonfinite_steps``): the tolerated
        iteration would write NaN into the weights, and every later loss would be NaN too.

        Raises:
            ValueError: naming the patience and the settings that skip such a step.
        """
        patience = self.divergence.patience
        if patience and not getattr(self.runner.optim_wrapper, 'skips_nonfinite_steps', False):
            raise ValueError(
                f'train_cfg.nonfinite_patience={patience} tolerates non-finite iterations, but '
                "this optimiser's step does not skip one: its NaN gradients would reach the "
                "weights. A step is skipped by xmr's OptimWrapper with clip_grad=dict("
                "max_norm=...) and a fused Adam or AdamW (the constructor's default, not "
                "foreach, not sparse=True tables, without compiled_step), or by fp16's loss "
                "scaler (AutocastOptimWrapper, dtype='float16'); else set "
                'nonfinite_patience=0')

    def _check_optimizer_groups(self) -> None:
        """The optimiser holds every parameter a phase trains, its groups start at one rate
        (the loop sets each group's rate from its phase: a rate of its own would be
        overwritten at the first step), and each ``lr_mult`` names one of its groups.

        Raises:
            ValueError: naming the phase and the parameters, the rates or the group names;
                MMEngine's default constructor leaves out the parameters frozen at build and
                applies ``paramwise_cfg``'s ``lr_mult`` as starting rates.
        """
        param_groups = self.runner.optim_wrapper.optimizer.param_groups
        held = {id(p) for group in param_groups for p in group['params']}
        fix = ("build the optimiser with constructor='PhasedOptimWrapperConstructor' (every "
               "parameter, grouped by module) and give multipliers as the phases' lr_mult")
        # Built, not resumed: a resumed optimiser holds the last step's rates, lr_mult's in them.
        rates = sorted({group['lr'] for group in param_groups})
        if self._iter == 0 and len(rates) > 1:
            raise ValueError(f'the optimiser groups start at rates {rates}, which the loop '
                             f"replaces at the first step with each phase's lr; {fix}")
        for phase in self.phases:
            if self._iter >= phase.end:
                continue
            left_out = [name for name, parameter in self.model.named_parameters()
                        if id(parameter) not in held and name not in self._built_frozen
                        and phase.trains(name)]
            if left_out:
                raise ValueError(f'phase {phase.name}: the optimiser holds no '
                                 f'{len(left_out)} of the parameters it trains ({left_out[:3]}); '
                                 f'{fix}')
        groups = {g.get('name') for g in param_groups}
        for phase in self.phases:
            unknown = sorted(set(phase.lr_mult) - groups)
            if unknown:
                raise ValueError(f'phase {phase.name}: lr_mult names {unknown}, which are no '
                                 f'parameter group of the optimiser; it has '
                                 f'{sorted(g for g in groups if g)}')
        self._warn_of_idle_lr_mults(param_groups)

    def _warn_of_idle_lr_mults(self, param_groups: list[dict]) -> None:
        """Warn of each phase's ``lr_mult`` on a group whose parameters the phase does not
        train: the multiplier then scales nothing, where its writer meant a rate for weights
        they took to be training (a group left out of ``trainable``)."""
        names = {id(parameter): name for name, parameter in self.model.named_parameters()}
        for phase in self.phases:
            # A name may hold two groups (with and without weight decay): idle when both are.
            trained = {group.get('name') for group in param_groups
                       if any(phase.trains(names.get(id(p), '')) for p in group['params'])}
            idle = sorted(set(phase.lr_mult) - trained)
            if idle:
                self.runner.logger.warning(
                    f'phase {phase.name}: lr_mult scales the groups {idle}, whose parameters the '
                    f'phase does not train (trainable={phase.trainable}), so it changes nothing; '
                    "add them to the phase's trainable, or drop them from its lr_mult")

    def _check_phases_against_model(self) -> None:
        """Every phase's ``trainable`` prefixes match parameters and the model can run its
        losses (the model's ``check_phase``: names, and what the model needs for them; its
        ``check_schedule``, where it has one: what the phases must do together).

        A ``trainable`` entry naming one of the model's groups (``trainable_groups``, e.g.
        ``target``) is replaced by the group's prefixes here, once, before anything trains.
        Parameters built frozen (:func:`built_frozen`) match no prefix.
        """
        names = [name for name, _ in self.model.named_parameters()
                 if name not in self._built_frozen]
        check_phase = getattr(self.model, 'check_phase', None)
        groups = getattr(self.model, 'trainable_groups', dict)()
        for phase in self.phases:
            named = list(phase.trainable)
            phase.trainable = [prefix for entry in named for prefix in groups.get(entry, [entry])]
            if not phase.trainable:
                raise ValueError(f'phase {phase.name}: trainable={named} names groups this model '
                                 f'leaves empty ({groups}); name the modules to train')
            for prefix in phase.trainable:
                if not any(under_prefix(n, prefix) for n in names):
                    modules = {n.rsplit('.', depth)[0] for n in names
                               for depth in range(1, n.count('.') + 1)}
                    fixed = ' but those its module built frozen (requires_grad=False), ' \
                        'which no phase trains' if any(
                            under_prefix(n, prefix)
                            for n in self._built_frozen) else ''
                    raise ValueError(f"phase {phase.name}: trainable prefix '{prefix}' matches "
                                     f'no parameter of the model{fixed}'
                                     f'{did_you_mean(prefix, modules)}')
            if phase.cache_features:
                _refuse_cache_of_trained_backbone(phase, names)
            if check_phase is not None:
                check_phase(phase.name, phase.loss_weights)
        check_schedule = getattr(self.model, 'check_schedule', None)
        if check_schedule is not None:
            check_schedule({phase.name: phase.loss_weights for phase in self.phases})

    def _warn_of_fixed_loss_parameters(self) -> None:
        """Warn of each phase that runs a loss with learnt parameters (``InfoNCELoss``'s
        ``learnable=True`` temperature) without training them: the loss then scores at their
        initial values throughout (the default ``source_cm``'s τ = 0.07 under a phase that
        trains only ``backbone``), which the config never says."""
        losses = getattr(self.model, 'losses', {})
        for phase in self.phases:
            for name, weight in phase.loss_weights.items():
                if not weight or name not in losses:
                    continue
                fixed = [key for key in (f'losses.{name}.{local}' for local, _
                                         in losses[name].named_parameters())
                         if key not in self._built_frozen and not phase.trains(key)]
                if fixed:
                    self.runner.logger.warning(
                        f"phase {phase.name}: runs the loss '{name}' but does not train its "
                        f'learnt parameters {fixed}, which stay at their initial values; add '
                        f"'losses.{name}' to the phase's trainable to learn them, or fix them "
                        "in the loss's config (InfoNCELoss: learnable=False)")

    # ----------------------------------------------------------------------------- phases
    def _enter_phase(self, index: int, fresh: bool) -> Iterator:
        phase = self.phases[index]
        if fresh and phase.start_from_best is not None:
            self.phase_best.restore(self.runner, self.phases[index - 1], phase)
        self.current_phase = phase
        self.model.set_phase(phase.name, phase.loss_weights)
        for name, parameter in self.model.named_parameters():
            parameter.requires_grad_(name not in self._built_frozen and phase.trains(name))
        # DDP syncs the parameters that require grad when it wraps: wrap for this phase's set.
        rewrap_for_phase(self.runner)
        self._trained_modules = None
        self._frozen_norms = frozen_eval_modules(self.model, phase.trainable)
        self._start_optimiser(phase, fresh)
        self.runner.message_hub.update_info('phase', phase.name)
        self.runner.logger.info(_phase_header(phase, self.model))
        dataloader = self._prepared_dataloader(index)
        # For a resume in the phase's middle to check (_check_resumed_batches).
        self.runner.message_hub.update_info(_batching_key(phase), batching_record(dataloader))
        return self._resumed_data(phase, dataloader, self._iter - phase.start)

    def _start_optimiser(self, phase: Phase, fresh: bool) -> None:
        """The optimiser's side of entering ``phase``: afresh, its state and the log window's
        losses emptied; its accumulation windows counted from the phase's start; its rate."""
        optim_wrapper = self.runner.optim_wrapper
        if fresh:
            optim_wrapper.optimizer.state.clear()
            # The log window would otherwise keep averaging in an earlier phase's losses and
            # gradient norms (of the parameters it trained); on resume re-entry it holds this
            # phase's, restored with the checkpoint.
            scalars = self.runner.message_hub.log_scalars
            norm = f"train/{getattr(optim_wrapper, 'grad_name', 'grad_norm')}"
            for key in [k for k in scalars if k.startswith('train/loss') or k == norm]:
                scalars.pop(key)
                # Else every later checkpoint lists it, and its resume warns of a key not there.
                self.runner.message_hub._resumed_keys.pop(key, None)
            optim_wrapper.zero_grad()
        # Gradient accumulation (optim_wrapper.accumulative_counts) counts its windows within
        # the phase, as MMEngine counts them within a run: the phase's last window steps at its
        # end however short, and no phase steps gradients of the one before.
        optim_wrapper.initialize_count_status(self.model, self._iter - phase.start, phase.iters)
        if optim_wrapper.base_param_settings is not None:
            optim_wrapper.base_param_settings['lr'] = phase.lr  # logged as base_lr

    def _prepared_dataloader(self, index: int) -> DataLoader:
        """Phase ``index``'s dataloader, checked to yield batches, its feature caches built or
        checked against the live weights, its workers tokenising and ignoring preemption."""
        dataloader = self._phase_dataloader(index)
        self._built_dataloaders.pop(index, None)
        # An iterations-phase's loader is counted here, when first built (the epochs path
        # counts it when the loop is built); an empty one would end in a bare StopIteration.
        if hasattr(dataloader, '__len__') and len(dataloader) == 0:
            raise _no_batch_error(self.phases[index])
        # A build reads the data in a pass of its own, which draws from torch's stream; a run
        # resumed here, or given a cache built ahead, finds it built and draws nothing.
        with preserved_rng_state():
            prepare_feature_caches(dataloader, self.model)
        tokenize_in_workers(dataloader, self.model)
        workers_ignore(dataloader, preemption_signals(self.runner))
        return dataloader

    def _check_resumed_batches(self, phase: Phase, dataloader: DataLoader) -> None:
        """A phase resumed in its middle reads the batches its checkpoint was trained on (the
        :func:`batching_record` entering it kept in the message hub, which checkpoints carry).

        Its first ``done`` batches are skipped, and its schedule goes on counting them: under
        another batch size or data (a ``--cfg-options`` of the first run left out of the
        resume) the items skipped are not those trained, and the phase trains on with batches
        its earlier iterations never saw. :meth:`_check_resumed_schedule` compares the rest of
        the schedule.

        Raises:
            ValueError: naming the phase, both batchings and what to do.
        """
        before = self.runner.message_hub.get_info(_batching_key(phase))
        now = batching_record(dataloader)
        if before is not None and before != now:
            raise ValueError(
                f'cannot resume phase {phase.name} at iteration {self._iter}: its checkpoint was '
                f'trained on {before}, this config gives {now}, so the {self._iter - phase.start} '
                'batches it skips would not be those it trained on. Resume with the config that '
                'wrote it (the work dir holds its dump) and its --cfg-options, or start a new run '
                'from its weights (load_from=..., without --resume)')

    def _resumed_data(self, phase: Phase, dataloader: DataLoader, done: int) -> Iterator:
        """The phase's data from its batch ``done`` on (0 for a phase starting afresh)."""
        if not done:
            return _InfiniteIterator(dataloader)
        if can_skip_at_sampler(dataloader):
            self.runner.logger.info(
                f'phase {phase.name}: resuming at iteration {self._iter}: skipped its first '
                f'{done} batches at the sampler ({done // len(dataloader)} whole passes + '
                f'{done % len(dataloader)} batches), none read')
            return _InfiniteIterator(dataloader, start=done)
        self.runner.logger.warning(
            f'phase {phase.name}: resuming at iteration {self._iter}: its dataloader batches '
            f'with {type(dataloader.batch_sampler).__name__}, whose batches cannot be skipped '
            f'without drawing them; reading and dropping {done} batches')
        iterator = _InfiniteIterator(dataloader)
        for _ in range(done):
            next(iterator)
        return iterator

    def _warn_if_optimiser_restarts(self, phase: Phase) -> None:
        """A phase resumed in its middle, after its first step, from a checkpoint without
        optimiser state (``best_*``); inside its first accumulation window it has none yet."""
        stepped = self._iter - phase.start >= self._accumulation_window()
        if stepped and not self.runner.optim_wrapper.optimizer.state:
            self.runner.logger.warning(
                f'phase {phase.name}: resumed at iteration {self._iter} from a checkpoint '
                'without optimiser state (best_*.pth keeps only weights): Adam restarts from '
                'zero moments and the run departs from the uninterrupted one; resume from an '
                'iter_*.pth checkpoint to continue exactly')

    def _warn_if_window_lost(self, phase: Phase) -> None:
        """A phase resumed inside a gradient-accumulation window from a checkpoint without the
        window's gradients (``optimizer.pending_grads``: one of MMEngine's wrappers, or several
        ranks' saved without xmr's ``CheckpointHook``)."""
        window = self._accumulation_window()
        done = (self._iter - phase.start) % window
        if done and all(p.grad is None for p in self.model.parameters()):
            self.runner.logger.warning(
                f'phase {phase.name}: resumed at iteration {self._iter} inside an accumulation '
                f'window of {window} iterations ({done} done) from a checkpoint without '
                "their gradients (optimizer.pending_grads): the window's step sums the "
                f'iterations from {self._iter + 1} on alone and the run departs from the '
                "uninterrupted one; xmr's OptimWrapper and CheckpointHook save them")

    def _accumulation_window(self) -> int:
        """The iterations of a gradient-accumulation window (``accumulative_counts``; 1)."""
        return getattr(self.runner.optim_wrapper, '_accumulative_counts', 1)

    def _set_lr(self, phase: Phase) -> None:
        factor = phase_lr_factor(self._iter - phase.start, phase.iters, phase.warmup_ratio,
                                 phase.schedule, phase.min_lr_ratio)
        for group in self.runner.optim_wrapper.optimizer.param_groups:
            group['lr'] = phase.lr * phase.lr_mult.get(group.get('name', ''), 1.0) * factor

    def validate(self) -> None:
        """Run the validation loop (the training streams untouched) and record, in the message
        hub that checkpoints carry, the iteration it finished at (``last_validation_iter``)."""
        if self.runner.val_loop is not None:
            with preserved_rng_state():
                metrics = self.runner.val_loop.run()
            self.phase_best.record(self.runner, self.current_phase, metrics or {}, self._iter)
            # Not a 'val...' name: MMEngine logs those infos as the validation's results.
            self.runner.message_hub.update_info('last_validation_iter', self._iter)

    def _validation_missed(self) -> bool:
        """Whether the iteration a run resumes at owed a validation its checkpoint does not
        record as finished.

        A checkpoint is written before the validation of its iteration: a kill during that
        validation, or a stop before it (SIGTERM), would lose its report column and the best
        checkpoint it may find. The resumed run makes it up, on the same weights.
        """
        return self.runner.message_hub.get_info('last_validation_iter', -1) < self._iter

    def _validate_phase_end(self, phase: Phase, resumed: bool = False) -> None:
        """Validate at ``phase``'s end (``validate_at_phase_end``). Resumed there, make up the
        validation due at that iteration, the phase end's or ``val_interval``'s, if the
        checkpoint does not record it (:meth:`_validation_missed`)."""
        due = self.validate_at_phase_end or (
            resumed and self.val_interval and self._iter % self.val_interval == 0)
        if not due or (resumed and not self._validation_missed()):
            return
        self.current_phase = phase  # the report labels the column '<phase> end'
        self.validate()

    def run(self) -> torch.nn.Module:
        """Train every phase; a run that fails lets its hooks undo what outlives it.

        Hooks that take something of the process or the work dir in ``before_train`` (a signal
        handler, the work-dir lock) give it back in ``after_train``, which a failed run never
        reaches; a hook's ``after_failed_train(runner)``, if it has one, runs then instead, so a
        notebook whose run raised neither keeps the work dir locked nor swallows SIGTERM. Every
        hook's runs even when one before it raises, and the run's own error is the one raised
        (:func:`~xmr.engine.hook_points.call_failure_point`).
        Persistent DataLoader workers end with training either way (:func:`end_persistent_workers`);
        an error in ending them is the run's own only where training succeeded.
        """
        try:
            model = self._run_phases()
        except BaseException as failure:
            call_failure_point(self.runner, 'after_failed_train', failure)
            call_while_failing(self.runner, 'end_persistent_workers', end_persistent_workers,
                               failure)
            raise
        end_persistent_workers()
        return model

    def _run_phases(self) -> torch.nn.Module:
        self._reseed_built_samplers()
        self._check_before_training()
        if self.runner.val_loop is not None:
            # A preemption's signal reaches every process of the job: the validation's workers
            # must outlive it, as the phases' do, for the validation and the stop to finish.
            for loader, _ in scored_loaders(self.runner.val_loop):
                workers_ignore(loader, preemption_signals(self.runner))
        self.runner.call_hook('before_train')
        # After the hooks: the work dir's lock (WorkDirLockHook) is this run's.
        self.phase_best.remove_partial_files(self.runner)
        self.runner.call_hook('before_train_epoch')
        for index, phase in enumerate(self.phases):
            if self._iter >= phase.end or self.stop_training:
                # A phase already done (resume) or cut off releases the loader built to count it.
                self._built_dataloaders.pop(index, None)
                if self._iter == phase.end and not self.stop_training:
                    self._validate_phase_end(phase, resumed=True)
                continue
            self._run_phase(index, phase)
        self.runner.call_hook('after_train_epoch')
        self.runner.call_hook('after_train')
        return self.runner.model

    def _run_phase(self, index: int, phase: Phase) -> None:
        """Set up phase ``index`` (from its start, or resumed in its middle), train it to its
        end or a stop, and validate it there."""
        fresh = self._iter == phase.start
        if fresh:
            # Resumed where the phase begins: the uninterrupted run set it up with the
            # checkpoint's streams.
            self._restore_pending_rng_state()
            if self._stopped_at_phase_boundary():
                return
        iterator = self._enter_phase(index, fresh)
        if not fresh:
            self._warn_if_optimiser_restarts(phase)
            self._warn_if_window_lost(phase)
        # Resumed in its middle: after the phase's set-up, whose draws the uninterrupted run
        # made before the checkpoint.
        self._restore_pending_rng_state()
        if fresh and self._stopped_at_phase_boundary():
            return
        if fresh and phase.validate_at_start:
            self.validate()
        elif (not fresh and self.val_interval and self._iter % self.val_interval == 0
              and self._validation_missed()):
            self.validate()
        restart_iteration_timers(self.runner)
        self._train_phase(phase, iterator)
        if self._iter == phase.end and not self.stop_training:
            self.divergence.check_phase_end(phase.name)
            self._validate_phase_end(phase)

    def _train_phase(self, phase: Phase, iterator: Iterator) -> None:
        """The iterations of ``phase`` from the current one to its end or a stop, each followed
        by the validation ``val_interval`` asks for (the phase end's apart)."""
        while self._iter < phase.end and not self.stop_training:
            self._set_lr(phase)
            self._trained_modules = ensure_train_mode(
                self.runner.model, self._trained_modules, self._frozen_norms)
            self.run_iter(next(iterator))
            at_end = self._iter == phase.end
            # A stopped run (SIGTERM: PreemptionHook) validates nothing: its checkpoint is
            # written, the scheduler's kill is near, and a resumed run validates there.
            if (self.val_interval and self._iter % self.val_interval == 0
                    and not (at_end and self.validate_at_phase_end)
                    and not self.divergence.streak and not self.stop_training):
                self.validate()

    def _stopped_at_phase_boundary(self) -> bool:
        """Whether a hook stopped training where a phase follows another (``PreemptionHook``'s
        ``at_phase_boundary``: a signal noted during the phase end's validation or the next
        phase's set-up). Nothing has drawn from the training streams since the iteration
        ended (validation and set-up preserve them), so a checkpoint written here resumes as
        that iteration's; after the set-up it holds the weights the phase starts from (under
        ``start_from_best`` the previous phase's best, which the resumed run loads again). At
        the first phase there is no iteration to keep."""
        if self._iter == 0:
            return False
        call_hook_point(self.runner, 'at_phase_boundary')
        return self.stop_training

    def _restore_pending_rng_state(self) -> None:
        """Restore the resumed checkpoint's streams (``RNGStateHook``'s), once."""
        if self.pending_rng_state is not None:
            restore_rng_state(self.pending_rng_state)
            self.pending_rng_state = None

    def run_iter(self, data_batch: Any) -> None:
        self.runner.call_hook('before_train_iter', batch_idx=self._iter, data_batch=data_batch)
        # Again after the hooks (the hooks see the modes the step runs in; a check of flags when
        # none changed): one that calls model.train(), CDDS's correlation refresh, would put the
        # frozen norms in training mode for this very step.
        self._trained_modules = ensure_train_mode(self.runner.model, self._trained_modules,
                                                  self._frozen_norms)
        optim_wrapper = self.runner.optim_wrapper
        outputs = self.runner.model.train_step(data_batch, optim_wrapper=optim_wrapper)
        keeps_norm = isinstance(optim_wrapper, OptimWrapper)
        outputs, norm = read_to_host(outputs, optim_wrapper.pending_norm if keeps_norm else None)
        finite = self.divergence.check(outputs, self.current_phase.name, self._iter + 1)
        if keeps_norm:
            self.divergence.check_applied_gradients(norm, optim_wrapper.skips_nonfinite_steps,
                                                    self.current_phase.name, self._iter + 1)
            optim_wrapper.pending_norm = norm
            optim_wrapper.log_pending_norm(log=finite)
        if finite:
            self.runner.call_hook('after_train_iter', batch_idx=self._iter,
                                  data_batch=data_batch, outputs=outputs)
        else:
            self.runner.logger.warning(
                f'phase {self.current_phase.name}: non-finite loss at iteration {self._iter + 1} '
                f'({dict(nonfinite_terms(outputs))}), {self.divergence.streak} in a row of '
                f'{self.divergence.patience} tolerated; the iteration reaches no hook')
        self._iter += 1
