"""MMEngine's optimiser wrapper, without its wait for the device in the middle of a step, with
the backward optionally traced and compiled whole (compiled autograd) and the clip and the
optimiser's step optionally compiled."""
from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
import torch.distributed as dist
from mmengine.dist import get_rank, get_world_size, is_distributed
from mmengine.logging import print_log
from mmengine.optim import OptimWrapper as MMEngineOptimWrapper

from xmr.engine.optim import HybridOptimizer
from xmr.models.losses.distributed import host_group
from xmr.registry import OPTIM_WRAPPERS


class PhaseWindowCounts:
    """Gradient-accumulation windows counted as :class:`~xmr.engine.loops.PhasedTrainLoop`
    counts them, for xmr's :class:`OptimWrapper` and the AMP wrappers alike (a mixin before
    an MMEngine wrapper among the bases).
    """

    def initialize_count_status(self, model: torch.nn.Module, init_counts: int,
                                max_counts: int) -> None:
        """MMEngine's, without its warning for a count inside a window (``Resumed iteration
        number is not divisible by ...``, some gradients lost): the runner calls it with the
        run's iteration where xmr's windows count within each phase, and a checkpoint of xmr's
        wrapper carries the window's gradients; :class:`~xmr.engine.loops.PhasedTrainLoop`
        warns where a run resumed inside a window has lost them."""
        # Counted from 0, MMEngine finds no window under way.
        super().initialize_count_status(model, 0, max_counts)
        self._inner_count = init_counts


#: What a parameter group holds besides the config's settings: its parameters, the rate the
#: phased loop sets every iteration, and how torch runs the step (``fused``, ``foreach``,
#: ``capturable``: the device decides, and the loaded state is placed by the checkpoint's).
_NOT_SETTINGS = frozenset({'params', 'param_names', 'lr', 'initial_lr', 'foreach', 'fused',
                           'capturable', 'differentiable'})


class BuiltSettingsKept:
    """A resume keeps the optimiser settings of the config (a mixin before an MMEngine wrapper
    among the bases).

    torch's ``Optimizer.load_state_dict`` replaces every parameter group's settings
    (``weight_decay``, ``betas``, ``eps``, the group's ``name``) with the checkpoint's: a run
    resumed with ``--cfg-options optim_wrapper.optimizer.weight_decay=0.05`` trained on at the
    checkpoint's decay, also in the phases it added, with nothing said. Here each group takes
    its built settings back after the load, and :attr:`resumed_setting_changes` says which
    differed, for :class:`~xmr.engine.loops.PhasedTrainLoop` to refuse inside a phase begun
    under the checkpoint's and to log where a phase begins. So does the gradient-accumulation
    window (``accumulative_counts``), where the checkpoint records it (xmr's
    :class:`OptimWrapper` does): the config's always applies, and inside a phase another one
    would sum a window's gradients under two loss divisors and step at other iterations.
    """

    #: One line per setting the checkpoint held otherwise than the config, after a load.
    resumed_setting_changes: tuple[str, ...] = ()

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        counts = state_dict.pop('accumulative_counts', self._accumulative_counts)
        built = [_group_settings(group) for group in self.optimizer.param_groups]
        super().load_state_dict(state_dict)
        changes = _restore_settings(self.optimizer.param_groups, built)
        if counts != self._accumulative_counts:
            changes.append(f'accumulative_counts={counts} in the checkpoint, '
                           f'{self._accumulative_counts} in the config')
        self.resumed_setting_changes = tuple(changes)


def _group_settings(group: dict) -> dict[str, Any]:
    return {key: value for key, value in group.items() if key not in _NOT_SETTINGS}


def _same_setting(first: Any, second: Any) -> bool:
    """Whether two values of a group setting are equal (a list and a tuple of the same
    numbers are: a config's ``betas`` may be either; tensors by value)."""
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return torch.equal(torch.as_tensor(first).cpu(), torch.as_tensor(second).cpu())
    if isinstance(first, (list, tuple)) and isinstance(second, (list, tuple)):
        return len(first) == len(second) and all(map(_same_setting, first, second))
    return first == second


def _restore_settings(groups: list[dict], built: list[dict[str, Any]]) -> list[str]:
    """Put each group's ``built`` settings back; a line for each the groups held otherwise."""
    changes = []
    for index, (group, settings) in enumerate(zip(groups, built, strict=True)):
        for key, value in settings.items():
            if key in group and not _same_setting(group[key], value):
                changes.append(f"group {settings.get('name', index)!r}: {key}={group[key]!r} in "
                               f'the checkpoint, {value!r} in the config')
            group[key] = value
    return changes


@OPTIM_WRAPPERS.register_module()
class OptimWrapper(PhaseWindowCounts, BuiltSettingsKept, MMEngineOptimWrapper):
    """MMEngine's ``OptimWrapper`` whose clipping leaves the gradients' norm on the device.

    MMEngine logs the clipped gradients' total norm as ``float(norm)`` inside ``step``: on a GPU
    the host waits there for the backward before it launches the optimiser's step, and the
    device then idles while the host runs that step. Here the norm is kept as
    :attr:`pending_norm` and logged by :meth:`log_pending_norm`, which
    :class:`~xmr.engine.loops.PhasedTrainLoop` calls once the iteration's losses are read (the
    step's one wait) and before the iteration's hooks run, so the log's history is MMEngine's.
    Used without that loop, call :meth:`log_pending_norm` after ``update_params``.

    A step whose clipped gradients' norm is NaN or infinite updates nothing when the optimiser
    is fused (torch's fused kernels take a ``found_inf`` flag, as with fp16's loss scaler, and
    skip the update on the device, no wait): one bad batch leaves the weights and the
    optimiser's state as they were, which is what the loop's ``nonfinite_patience`` tolerates
    (:attr:`skips_nonfinite_steps`; the loop refuses a patience without it).

    With ``compiled_autograd``, each backward is traced by torch's compiled autograd and
    compiled by ``torch.compile`` with these options: the accumulation of every gradient into
    its parameter becomes part of one compiled graph (and of its CUDA graph under
    ``mode='reduce-overhead'``), where autograd's engine otherwise runs one ``AccumulateGrad``
    node per trained tensor on the host (240 in DASD's step at ViT-B/32). The arithmetic is
    the same; a new structure of the autograd graph (another phase's losses) is traced again.
    Runs without a launcher only: DDP's gradient hooks are not traced.

    With ``compiled_step``, :meth:`step` (the clip, then the optimiser's step) is compiled by
    ``torch.compile`` with these options, the optimiser traced as torch's compiled optimisers
    are (its foreach form, ``capturable=True``: the step counts on the device): the Python
    loops over the trained tensors leave the host's step for Inductor's fused kernels, without
    CUDA graphs (:func:`refuse_cuda_graphs`). Each group's learning rate enters as a device
    tensor filled before the call (:meth:`lrs_as_tensors`), so the loop's new rate at every
    iteration compiles nothing again, while the groups keep their float rates for the
    schedulers, the logs and the state dict. A new set of trained tensors (another phase's)
    is traced again.

    Args:
        compiled_autograd: ``torch.compile`` options for the traced backward (``mode``,
            ``backend``, ...), or ``None`` for autograd's engine.
        compiled_step: ``torch.compile`` options for the clip and the optimiser's step
            (``dict()``: Inductor's default mode), or ``None`` to run them eagerly.
        **kwargs: :class:`mmengine.optim.OptimWrapper` arguments.
    """

    #: Where ``**kwargs`` go: a misspelt option is refused when the config loads, not by
    #: Python as the runner builds the wrapper.
    forwards_options_to = (MMEngineOptimWrapper.__init__,)

    #: The total norm of the last step's gradients (before clipping), until
    #: :meth:`log_pending_norm` takes it.
    pending_norm: torch.Tensor | None = None
    #: Its name in the log: MMEngine's, which names it only where ``clip_grad`` is set.
    grad_name = 'grad_norm'
    #: Steps skipped for non-finite gradients so far (each said in its own warning).
    skipped_steps = 0
    #: Every rank's window gradients for rank 0's next :meth:`state_dict`
    #: (:meth:`gather_pending_grads`).
    _gathered_grads: list[list[torch.Tensor | None]] | None = None

    def __init__(self, *args: Any, compiled_autograd: dict | None = None,
                 compiled_step: dict | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _check_clip_threshold(self.clip_grad_kwargs)
        for name, options in (('compiled_autograd', compiled_autograd),
                              ('compiled_step', compiled_step)):
            if options is not None and not isinstance(options, dict):
                raise ValueError(f'optim_wrapper.{name} must be a dict of torch.compile '
                                 f'options (e.g. dict(mode="reduce-overhead")), got {options!r}')
            if options is not None and isinstance(self.optimizer, HybridOptimizer):
                raise ValueError(f'optim_wrapper.{name} cannot trace the sparse gradients of an '
                                 'embedding table built with sparse=True; drop one of them')
        if compiled_step is not None:
            refuse_cuda_graphs(compiled_step)
            check_traceable(self.optimizer)
        self.compiled_autograd = compiled_autograd
        self._backward_compiler = (None if compiled_autograd is None
                                   else torch.compile(**compiled_autograd))
        self.compiled_step = compiled_step
        self._compiled_step = (None if compiled_step is None
                               else torch.compile(self._clip_and_step, **compiled_step))
        self._lr_tensors: list[torch.Tensor] | None = None

    def backward_context(self) -> AbstractContextManager:
        """Where :meth:`backward` runs: compiled autograd's tracing with ``compiled_autograd``.

        Raises:
            RuntimeError: ``compiled_autograd`` in a distributed run (a launcher's, whose model
                DDP wraps even in one process).
        """
        if self._backward_compiler is None:
            return nullcontext()
        if is_distributed():
            raise RuntimeError('optim_wrapper.compiled_autograd traces no DDP gradient hook: '
                               'drop it for distributed runs')
        from torch._dynamo import compiled_autograd as tracer

        return tracer._enable(self._backward_compiler)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        with self.backward_context():
            loss.backward(**kwargs)
        self._inner_count += 1

    def step(self, **kwargs: Any) -> None:
        """Clip (with ``clip_grad``), then the optimiser's step, skipped on the device when the
        clipped norm is not finite (:attr:`skips_nonfinite_steps`); compiled with
        ``compiled_step`` (a step given arguments, a closure, runs eagerly)."""
        if self._compiled_step is None or kwargs:
            self._clip_and_step(**kwargs)
            return
        with self.lrs_as_tensors():
            self._compiled_step()

    @property
    def skips_nonfinite_steps(self) -> bool:
        """Whether a step whose clipped gradients' norm is not finite updates nothing (a
        subclass may add ways, as fp16's loss scaler): see :meth:`_fused_step_skips`."""
        return self._fused_step_skips()

    def _fused_step_skips(self) -> bool:
        """Whether the step hands the fused optimiser ``found_inf`` from the clipped norm, so
        that a non-finite norm updates nothing: with a fused optimiser (Adam and AdamW by
        default, not the ``SparseAdam`` of sparse tables) and an eager step; the norm is
        ``clip_grad``'s (clipping by value computes none). A plain method no subclass
        overrides: the compiled step reads it, and Dynamo misreads a property that a subclass
        reaches through ``super()`` (torch 2.14: always true)."""
        return (self._compiled_step is None and bool(self.clip_grad_kwargs)
                and self.grad_name == 'grad_norm'
                and getattr(self.optimizer, '_step_supports_amp_scaling', False))

    def _clip_and_step(self, closure: Any = None) -> None:
        # The optimiser is called with a plain argument, not MMEngine's `**kwargs`: Dynamo
        # cannot split `optimizer.step(**kwargs)` at the graph break torch's optimisers make,
        # and would run the clip eagerly.
        norm = self._clip_grad() if self.clip_grad_kwargs else None
        if norm is None:
            norm = self._grad_norm()
        if norm is None or not self._fused_step_skips():
            self.optimizer.step(closure)
            return
        # 1.0 where the norm is NaN or inf: the fused kernel then leaves every tensor as is.
        self.optimizer.found_inf = (~torch.isfinite(norm)).float()
        try:
            self.optimizer.step(closure)
        finally:
            del self.optimizer.found_inf

    @contextmanager
    def lrs_as_tensors(self) -> Iterator[None]:
        """Each group's ``lr`` as a 0-d tensor on its parameters' device, filled with the
        group's float rate (one tensor per group, the same at every step: an input of the
        compiled step, not a constant of it); the floats are back on exit."""
        groups = self.optimizer.param_groups
        if self._lr_tensors is None:
            self._lr_tensors = [torch.zeros((), device=group['params'][0].device)
                                for group in groups]
        rates = [group['lr'] for group in groups]
        for group, tensor, rate in zip(groups, self._lr_tensors, rates, strict=True):
            group['lr'] = tensor.fill_(rate)
        try:
            yield
        finally:
            for group, rate in zip(groups, rates):
                group['lr'] = rate

    def _clip_grad(self) -> torch.Tensor | None:
        """Clip the gradients; their total norm before clipping (0-d, on their device), also
        kept as :attr:`pending_norm`, or ``None`` (no gradient, or clipping by value)."""
        params = self._stepped_parameters()
        if not params:
            return None
        # torch.nn.utils.clip_grad_value_ returns None: nothing to log.
        self.pending_norm = self.clip_func(params, **self.clip_grad_kwargs)
        return self.pending_norm

    def _grad_norm(self) -> torch.Tensor | None:
        """The gradients' total norm (0-d, on their device), kept as :attr:`pending_norm`,
        where no clip by norm computed it: a step that skips nothing applies what it gets, and
        the loop stops a run whose step applied non-finite gradients before a hook saves its
        weights."""
        grads = [p.grad for p in self._stepped_parameters()]
        self.pending_norm = torch.nn.utils.get_total_norm(grads) if grads else None
        return self.pending_norm

    def _stepped_parameters(self) -> list[torch.nn.Parameter]:
        """The trained parameters holding a gradient, which the step updates."""
        return [p for p in self._parameters() if p.requires_grad and p.grad is not None]

    def gather_pending_grads(self) -> None:
        """Collect on rank 0 every rank's gradients of the accumulation window under way, for
        :meth:`state_dict`: under DDP each rank holds those of its own batches (``no_sync``
        until the window's step) and rank 0 alone writes the checkpoint. A collective over the
        host's gloo group, which every rank calls before rank 0 saves (xmr's ``CheckpointHook``
        does); nothing is exchanged outside a window or with one rank."""
        self._gathered_grads = None
        if get_world_size() == 1 or self.should_update():
            return
        gathered = [None] * get_world_size() if get_rank() == 0 else None
        dist.gather_object(self._window_grads(), gathered, dst=0, group=host_group())
        self._gathered_grads = gathered

    def state_dict(self) -> dict:
        """The optimiser's state, its ``accumulative_counts`` (:class:`BuiltSettingsKept`) and,
        inside an accumulation window, the window's gradients so far (``pending_grads``: a
        list per rank, in rank order, of each parameter's of ``param_groups`` in order,
        ``None`` where it has none), so that a run resumed inside the window (a preemption's
        save) steps on the sum the uninterrupted run steps on. With
        several ranks, those :meth:`gather_pending_grads` collected for this save (none
        without it)."""
        state = dict(self.optimizer.state_dict(), accumulative_counts=self._accumulative_counts)
        gathered, self._gathered_grads = self._gathered_grads, None
        grads = [self._window_grads()] if get_world_size() == 1 else gathered
        if grads and any(grad is not None for rank in grads for grad in rank):
            state['pending_grads'] = grads
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Load :meth:`state_dict`'s, its ``pending_grads`` back onto the parameters: each
        rank's own where the checkpoint holds as many ranks as this run has
        (:func:`window_grads_for_this_rank`), brought from the loss scale they were saved at
        (fp16's ``loss_scaler``, else 1) to this run's (:meth:`_window_grad_scale`). fp16's
        loss scale, which a run without it cannot use, is dropped with a warning
        (:meth:`_load_loss_scaler`). The groups keep the config's settings
        (:class:`BuiltSettingsKept`)."""
        state_dict = dict(state_dict)
        saved = state_dict.pop('pending_grads', None)
        scaler_state = state_dict.pop('loss_scaler', None)
        self._load_loss_scaler(scaler_state)
        super().load_state_dict(state_dict)
        if saved is None:
            return
        # The scaler updates only at a window's step: the window's gradients so far carry the
        # scale the checkpoint holds (a disabled scaler's state is empty: none).
        saved_at = float((scaler_state or {}).get('scale', 1.0))
        factor = self._window_grad_scale() / saved_at
        for parameter, grad in zip(self._parameters(), window_grads_for_this_rank(saved),
                                   strict=True):
            parameter.grad = None if grad is None else grad.to(parameter.device) * factor

    def _load_loss_scaler(self, scaler_state: dict | None) -> None:
        """Take a checkpoint's fp16 loss-scaler state (``None``: it has none): this wrapper
        scales no loss, so it is dropped, with a warning."""
        if scaler_state is not None:
            print_log('the checkpoint was written under fp16 loss scaling, which this run does '
                      'not use; its loss scale is dropped (resume with --amp-dtype float16 to '
                      'keep training as it did)', logger='current', level=logging.WARNING)

    def _window_grad_scale(self) -> float:
        """The factor the gradients of a window under way carry: the loss scale their backward
        passes multiplied the loss by, which the step divides out (1: none here)."""
        return 1.0

    def _window_grads(self) -> list[torch.Tensor | None]:
        """Each parameter's gradient (of ``param_groups`` in order) copied to the host."""
        return [None if p.grad is None else p.grad.detach().to('cpu', copy=True)
                for p in self._parameters()]

    def _parameters(self) -> list[torch.nn.Parameter]:
        return [p for group in self.optimizer.param_groups for p in group['params']]

    def log_pending_norm(self, log: bool = True) -> None:
        """Take :attr:`pending_norm` and, with ``log``, log it as ``train/grad_norm`` (reading
        it waits for the backward that made it). ``log=False`` drops it: the loop's iteration
        with a non-finite loss reaches no hook, and logs no norm either. A non-finite norm
        whose step was skipped is said in a warning instead of logged (one ``inf`` would make
        the log window's mean ``inf``)."""
        norm, self.pending_norm = self.pending_norm, None
        if norm is None:
            return
        if not math.isfinite(float(norm)) and self.skips_nonfinite_steps:
            # Each its own text: MMEngine's logger prints a warning it has printed once only.
            self.skipped_steps += 1
            iteration = self.message_hub.get_info('iter')
            at = '' if iteration is None else f' at iteration {iteration + 1}'
            print_log(f'optimiser step skipped{at} ({self.skipped_steps} so far in this run): '
                      f"the clipped gradients' norm is {float(norm)}; the weights and the "
                      "optimiser's state are as they were", logger='current',
                      level=logging.WARNING)
        elif log and self.grad_name == 'grad_norm':  # clipped by value: a norm after the clip
            self.message_hub.update_scalar('train/grad_norm', float(norm))


def window_grads_for_this_rank(saved: list) -> list[torch.Tensor | None]:
    """This rank's share of a checkpoint's ``pending_grads`` (one list per rank that wrote it).

    Under the number of ranks that wrote them, each rank's own. Under another, each rank takes
    their mean over the saved ranks (a missing gradient counted as zero): DDP's step averages
    the ranks' gradients, so every rank holding ``(1/W) sum_r g_r`` brings the saved window's
    ``W`` ranks into the step as they would have come; no rank's batches are dropped. A
    checkpoint of an earlier xmr holds one rank's list.
    """
    if saved and not isinstance(saved[0], list):
        saved = [saved]
    if len(saved) == get_world_size():
        return saved[get_rank()]
    print_log(f"the checkpoint holds the accumulation window's gradients of {len(saved)} "
              f'rank(s), this run has {get_world_size()}: every rank continues from their mean',
              logger='current', level=logging.WARNING)
    return [None if all(grad is None for grad in grads) else
            sum(grad for grad in grads if grad is not None) / len(saved)
            for grads in zip(*saved, strict=True)]


def refuse_cuda_graphs(compiled_step: dict) -> None:
    """Refuse ``compiled_step`` options that would replay the step as CUDA graphs.

    A step compiled apart from the model is its own ``torch.compile`` call, which CUDA graph
    trees take as the start of a new generation: where the model replays as CUDA graphs too,
    the gradients are outputs of its backward's graph, and the step's graph overwrote them
    before reading them (an H200, torch 2.11: "accessing tensor output of CUDAGraphs that has
    been overwritten"). Without the model's graphs the clip scales gradients that no graph
    owns, which CUDA graphs skip, and Dynamo failed an assertion tracing the optimiser after
    the clip's graph. Inductor's kernels without CUDA graphs record nothing in the trees
    (on a GPU beside the model's graphs: not yet run).

    Raises:
        ValueError: a ``mode`` (``'reduce-overhead'``, ``'max-autotune'``) or an option
            (``triton.cudagraphs``) that turns CUDA graphs on, naming the options that keep
            the step's compilation without them.
    """
    from torch._inductor import list_mode_options

    settings = {**list_mode_options(compiled_step.get('mode') or 'default'),
                **compiled_step.get('options', {})}
    if settings.get('triton.cudagraphs'):
        raise ValueError(f'optim_wrapper.compiled_step={compiled_step!r} replays the clip and '
                         "the optimiser's step as CUDA graphs, which overwrite the gradients "
                         "a CUDA-graph backward wrote (a new graph generation): compile it "
                         "without them, compiled_step=dict() or dict(mode='max-autotune-no-"
                         "cudagraphs'); the model's compile keeps its CUDA graphs")


#: Each ``torch.compile`` mode that replays CUDA graphs, and its Inductor settings without them.
WITHOUT_CUDA_GRAPHS = {'reduce-overhead': 'default', 'max-autotune': 'max-autotune-no-cudagraphs'}


def wrapper_compile_options(option: str, mode: str) -> dict:
    """``optim_wrapper.<option>``'s ``torch.compile`` options beside a model compiled in
    ``mode``: the traced backward (``compiled_autograd``) in that mode, the step
    (``compiled_step``) in it without CUDA graphs (:func:`refuse_cuda_graphs`)."""
    return dict(mode=WITHOUT_CUDA_GRAPHS.get(mode, mode) if option == 'compiled_step' else mode)


def check_traceable(optimizer: torch.optim.Optimizer) -> None:
    """Refuse an optimiser whose step ``torch.compile`` cannot trace with a tensor ``lr``.

    Raises:
        ValueError: a group built with ``fused=True`` (torch runs fused steps untraced) or with
            ``capturable=False`` (a tensor ``lr`` and the step counts need it), naming the
            group and the fix.
    """
    for index, group in enumerate(optimizer.param_groups):
        name = group.get('name', index)
        if group.get('fused'):
            raise ValueError(f'optim_wrapper.compiled_step: the optimiser\'s group {name!r} is '
                             'fused, which torch.compile does not trace; build it with '
                             'foreach=True, capturable=True (PhasedOptimWrapperConstructor does '
                             'so for Adam and AdamW when compiled_step is set)')
        if group.get('capturable') is False:
            raise ValueError(f'optim_wrapper.compiled_step: the optimiser\'s group {name!r} has '
                             'capturable=False; a compiled step takes its lr as a tensor and '
                             'keeps the step counts on the device: set capturable=True')


def _check_clip_threshold(clip_grad: dict | None) -> None:
    """``clip_grad``'s ``max_norm`` or ``clip_value`` is a positive number: ``max_norm=-1``
    (the authors' "no clip") makes the scale ``max_norm / ||g||`` negative, every step then
    ascends the loss, and 0 zeroes every gradient.

    Raises:
        ValueError: naming the key, the value and ``clip_grad=None``.
    """
    for key in ('max_norm', 'clip_value'):
        value = (clip_grad or {}).get(key)
        if value is not None and not (isinstance(value, (int, float))
                                      and not isinstance(value, bool) and value > 0):
            raise ValueError(f'optim_wrapper.clip_grad.{key}={value!r} must be a positive '
                             'number; give clip_grad=None to train without clipping')
