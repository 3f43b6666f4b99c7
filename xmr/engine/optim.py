"""An optimiser with one named parameter group per module group, for phased training.

Parameters of embedding tables built with ``sparse=True`` get sparse gradients (only the rows of
the batch); the constructor gives them to a sparse optimiser (``SparseAdam``) and everything else
to the configured dense one, behind a single :class:`HybridOptimizer` so that MMEngine's
``OptimWrapper``, the AMP wrapper and the phased loop see one optimiser as usual.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sequence
from typing import Any

import torch
from mmengine.optim import OptimWrapper
from torch import nn
from torch.optim import Optimizer

from xmr.engine.phases import under_prefix
from xmr.engine.wrappers import unwrap_model
from xmr.registry import OPTIM_WRAPPER_CONSTRUCTORS, OPTIM_WRAPPERS, OPTIMIZERS
from xmr.utils.cli import UserKeyError, did_you_mean

DEFAULT_GROUPS = ('backbone', 'language_branch.embedding', 'language_branch.adapters',
                  'disentangler', 'losses')
#: Optimisers whose single-kernel ("fused") implementation the constructor picks by default.
FUSABLE = ('Adam', 'AdamW')


def group_of(name: str, groups: Sequence[str]) -> str:
    """The longest configured prefix of parameter ``name``, else its first component."""
    matches = [g for g in groups if name == g or name.startswith(g + '.')]
    return max(matches, key=len) if matches else name.split('.')[0]


def parameter_counts(model: nn.Module,
                     groups: Sequence[str] = DEFAULT_GROUPS) -> dict[str, tuple[int, int]]:
    """``{group: (trainable, total)}`` parameter counts (the #TP column of DASD's Table 1)."""
    counts: dict[str, list[int]] = {}
    for name, parameter in model.named_parameters():
        entry = counts.setdefault(group_of(name, groups), [0, 0])
        entry[0] += parameter.numel() if parameter.requires_grad else 0
        entry[1] += parameter.numel()
    return {group: (trainable, total) for group, (trainable, total) in counts.items()}


def fused_by_default(optimizer_cfg: dict, parameters: Sequence[nn.Parameter]) -> dict:
    """``optimizer_cfg`` with ``fused=True`` for Adam/AdamW when the parameters' device has
    fused kernels and the config chose neither ``fused`` nor ``foreach``.

    The fused update is the same Adam update in one kernel per step instead of a Python loop
    over tensors (on one CPU core: ~0.05 s instead of ~0.6 s for the 92M-parameter table).
    """
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    if optimizer_cfg.get('type') not in FUSABLE or {'fused', 'foreach'} & set(optimizer_cfg):
        return optimizer_cfg
    devices = {p.device.type for p in parameters}
    if len(devices) != 1 or not devices <= set(_get_fused_kernels_supported_devices()) or \
            any(not p.is_floating_point() for p in parameters):
        return optimizer_cfg
    return dict(optimizer_cfg, fused=True)


def traceable_by_default(optimizer_cfg: dict) -> dict:
    """``optimizer_cfg`` with ``foreach=True, capturable=True`` for Adam/AdamW when the config
    chose none of ``fused``, ``foreach`` and ``capturable``: the form ``torch.compile`` traces
    (``optim_wrapper.compiled_step``), the step counts on the parameters' device."""
    if optimizer_cfg.get('type') not in FUSABLE or \
            {'fused', 'foreach', 'capturable'} & set(optimizer_cfg):
        return optimizer_cfg
    return dict(optimizer_cfg, foreach=True, capturable=True)


def closure_loss(closure: Callable[[], float] | None) -> float | None:
    """The loss of an optimiser step's ``closure`` (torch's ``step(closure)`` contract), run
    with gradients on inside the step's ``no_grad``; ``None`` without one."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def sparse_parameter_names(model: nn.Module) -> set[str]:
    """Names of the parameters that receive sparse gradients (``nn.Embedding(sparse=True)``)."""
    names = set()
    for module_name, module in model.named_modules():
        if isinstance(module, (nn.Embedding, nn.EmbeddingBag)) and module.sparse:
            names.add(f'{module_name}.weight' if module_name else 'weight')
    return names


class _CombinedState(MutableMapping):
    """The per-parameter states of several optimisers seen as one mapping.

    ``clear()`` empties every part, which is how the phased loop restarts the optimiser state at
    each phase.
    """

    def __init__(self, parts: Sequence[Optimizer]) -> None:
        self._parts = parts

    def _owner(self, parameter: torch.Tensor) -> Optimizer:
        for optimizer in self._parts:
            if any(p is parameter for group in optimizer.param_groups for p in group['params']):
                return optimizer
        raise KeyError('parameter is not handled by this optimiser')

    def __getitem__(self, parameter: torch.Tensor) -> Any:
        for optimizer in self._parts:
            if parameter in optimizer.state:
                return optimizer.state[parameter]
        return self._owner(parameter).state[parameter]

    def __setitem__(self, parameter: torch.Tensor, value: Any) -> None:
        self._owner(parameter).state[parameter] = value

    def __delitem__(self, parameter: torch.Tensor) -> None:
        for optimizer in self._parts:
            if parameter in optimizer.state:
                del optimizer.state[parameter]
                return
        raise KeyError('parameter has no optimiser state')

    def __iter__(self) -> Iterator[torch.Tensor]:
        for optimizer in self._parts:
            yield from optimizer.state

    def __len__(self) -> int:
        return sum(len(optimizer.state) for optimizer in self._parts)

    def clear(self) -> None:
        for optimizer in self._parts:
            optimizer.state.clear()


class HybridOptimizer(Optimizer):
    """A dense optimiser and a sparse one behind the interface of a single optimiser.

    ``param_groups`` lists the dense groups then the sparse ones (the same dicts the two
    optimisers hold, so a learning rate set on a group reaches the optimiser that owns it);
    ``state`` is the union of both states; ``step``/``zero_grad`` run both. MMEngine's
    ``OptimWrapper`` (its norm clipping done by :func:`clip_grad_norm_with_sparse`), the AMP
    wrapper's ``GradScaler`` and the phased loop need nothing else.

    Args:
        dense: optimiser of the parameters with dense gradients (e.g. ``AdamW``).
        sparse: optimiser of the sparse-gradient tables (e.g. ``SparseAdam``).
    """

    def __init__(self, dense: Optimizer, sparse: Optimizer) -> None:
        # Optimizer.__init__ would register the parameters a second time; the hook tables are
        # what the base class's methods expect to find.
        self.dense = dense
        self.sparse = sparse
        self.defaults = dict(dense.defaults)
        self.param_groups = [*dense.param_groups, *sparse.param_groups]
        self.state = _CombinedState((dense, sparse))
        for table in ('_optimizer_step_pre_hooks', '_optimizer_step_post_hooks',
                      '_optimizer_state_dict_pre_hooks', '_optimizer_state_dict_post_hooks',
                      '_optimizer_load_state_dict_pre_hooks',
                      '_optimizer_load_state_dict_post_hooks'):
            setattr(self, table, OrderedDict())

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = closure_loss(closure)
        self.dense.step()
        self.sparse.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.dense.zero_grad(set_to_none=set_to_none)
        self.sparse.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {'dense': self.dense.state_dict(), 'sparse': self.sparse.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if set(state_dict) != {'dense', 'sparse'}:
            raise ValueError('this optimiser state was saved without sparse embedding updates; '
                             'load it into a model built with the same embedding `sparse` '
                             'setting, or start the optimiser afresh')
        self.dense.load_state_dict(state_dict['dense'])
        self.sparse.load_state_dict(state_dict['sparse'])
        # torch's load_state_dict gives each optimiser new group dicts: the combined list must
        # be those, or a learning rate set through it (the phased loop's, every iteration of a
        # resumed run) would not reach either optimiser.
        self.param_groups = [*self.dense.param_groups, *self.sparse.param_groups]

    def __repr__(self) -> str:
        return f'{type(self).__name__}(dense={self.dense!r}, sparse={self.sparse!r})'


def clip_grad_norm_with_sparse(parameters: Iterable[nn.Parameter], max_norm: float,
                               norm_type: float = 2.0, error_if_nonfinite: bool = False,
                               foreach: bool | None = None) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` that also takes sparse gradients, on any device.

    A sparse gradient is coalesced (repeated rows summed) and counts by its values, which is the
    norm of its dense form; torch's own function has no sparse norm kernel on CUDA. The scale is
    torch's, ``min(1, max_norm / (||g|| + 1e-6))``, applied to every gradient in place.
    ``foreach`` is accepted for MMEngine's call and not needed: this runs only for the
    configurations with sparse tables.

    Returns:
        The total norm of all gradients before clipping (0-d).
    """
    grads = []
    for parameter in parameters:
        if parameter.grad is None:
            continue
        if parameter.grad.is_sparse:
            parameter.grad = parameter.grad.coalesce()
            grads.append(parameter.grad._values())
        else:
            grads.append(parameter.grad)
    if not grads:
        return torch.tensor(0.0)
    device = grads[0].device
    total = torch.linalg.vector_norm(torch.stack(
        [torch.linalg.vector_norm(g, norm_type).to(device) for g in grads]), norm_type)
    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError(f'the total norm of order {norm_type} of the gradients is '
                           f'{float(total)}; clipping cannot make them finite')
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for grad in grads:
        grad.mul_(scale.to(grad.device, grad.dtype))
    return total


def clip_grad_value_with_sparse(parameters: Iterable[nn.Parameter], clip_value: float,
                                foreach: bool | None = None) -> None:
    """``torch.nn.utils.clip_grad_value_`` that also takes sparse gradients: a sparse
    gradient is coalesced (repeated rows summed, as its dense form holds them) and its values
    clamped to ``[-clip_value, clip_value]``; torch's own function has no sparse clamp.
    ``foreach`` is accepted for MMEngine's call and not needed.
    """
    for parameter in parameters:
        if parameter.grad is None:
            continue
        if parameter.grad.is_sparse:
            parameter.grad = parameter.grad.coalesce()
            parameter.grad._values().clamp_(-clip_value, clip_value)
        else:
            parameter.grad.clamp_(-clip_value, clip_value)


def check_groups_match(groups: Sequence[str], names: Sequence[str]) -> None:
    """Each configured group prefix names parameters of the model, but those of
    :data:`DEFAULT_GROUPS`, modules a model may lack (the dual encoders' ``disentangler``).

    A prefix that matches none (a misspelt ``'backbone.vison_proj'``, or one written for
    another model) would leave its parameters in the group of a shorter prefix, training them
    at that group's ``lr_mult`` (CDDS's towers' 0.1x) with nothing said; the phases' ``lr_mult``
    check sees only the groups the optimiser has.

    Raises:
        ValueError: naming the prefix, the closest module of the model and the fix.
    """
    for group in groups:
        if group in DEFAULT_GROUPS or any(under_prefix(name, group) for name in names):
            continue
        modules = {name.rsplit('.', depth)[0] for name in names
                   for depth in range(name.count('.') + 1)}
        raise ValueError(f"optim_wrapper.paramwise_cfg.groups: '{group}' matches no parameter "
                         f'of the model{did_you_mean(group, modules)}, so no group of that name '
                         'is built and its parameters would train in the group of a shorter '
                         'prefix, at its lr_mult; name a module of this model, or drop the entry')


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class PhasedOptimWrapperConstructor:
    """Builds the optimiser over every parameter a phase may train, grouped by module.

    Frozen parameters are included: a later phase unfreezes them (``requires_grad``), and a
    parameter without a gradient is skipped by the optimiser step. Groups carry a ``name`` so a
    phase can scale one group's learning rate (``lr_mult``); weight decay (the config's
    ``weight_decay``, else the optimiser's own default) is not applied to
    biases, norms and 0/1-d parameters.

    Tables with sparse gradients (the target embedding built with ``sparse=True``) go to
    ``paramwise_cfg['sparse_optimizer']`` (default ``SparseAdam`` with the dense optimiser's
    ``betas`` and ``eps``, its defaults where the config gives none), which updates only the
    rows of the batch and applies no weight decay; the wrapper then holds a
    :class:`HybridOptimizer`. Without sparse tables the dense
    optimiser is used alone. Adam and AdamW run fused (one kernel per step) unless the config
    sets ``fused`` or ``foreach`` itself (:func:`fused_by_default`), or in the form
    ``torch.compile`` traces when the wrapper compiles the step (``compiled_step``,
    :func:`traceable_by_default`).

    Args:
        optim_wrapper_cfg: MMEngine's ``optim_wrapper`` config (``type``, ``optimizer``, ...).
        paramwise_cfg: may hold ``groups`` (prefixes, default :data:`DEFAULT_GROUPS`; each
            configured one must match a parameter of the model, :func:`check_groups_match`) and
            ``sparse_optimizer`` (an ``OPTIMIZERS`` config without ``params``).

    Raises:
        ValueError: ``groups`` is no list of non-empty strings.
    """

    def __init__(self, optim_wrapper_cfg: dict, paramwise_cfg: dict | None = None) -> None:
        self.optim_wrapper_cfg = dict(optim_wrapper_cfg)
        paramwise_cfg = dict(paramwise_cfg or {})
        groups = paramwise_cfg.pop('groups', None)
        if groups is not None and (isinstance(groups, str) or not isinstance(groups, Sequence)
                                   or not all(isinstance(g, str) and g for g in groups)):
            # A string would be taken letter by letter: prefixes that match no parameter.
            raise ValueError(f'optim_wrapper.paramwise_cfg.groups={groups!r} must be a list of '
                             "parameter-name prefixes, e.g. ['backbone', 'backbone.vision_proj']")
        self.configured_groups = None if groups is None else tuple(groups)
        self.groups = DEFAULT_GROUPS if groups is None else self.configured_groups
        self.sparse_optimizer_cfg = paramwise_cfg.pop('sparse_optimizer', None)
        if paramwise_cfg:
            raise UserKeyError(f'PhasedOptimWrapperConstructor paramwise_cfg takes groups and '
                               f'sparse_optimizer, got {sorted(paramwise_cfg)}')

    def __call__(self, model: nn.Module) -> OptimWrapper:
        model = unwrap_model(model)
        if self.configured_groups is not None:
            check_groups_match(self.configured_groups, [n for n, _ in model.named_parameters()])
        cfg = dict(self.optim_wrapper_cfg)
        optimizer_cfg = dict(cfg.pop('optimizer'))
        # Given, the config's decay; else the optimiser's own default (AdamW's 0.01).
        decay = ({} if 'weight_decay' not in optimizer_cfg
                 else dict(weight_decay=optimizer_cfg['weight_decay']))
        sparse_names = sparse_parameter_names(model)
        buckets: dict[tuple[str, bool], list[nn.Parameter]] = {}
        sparse_buckets: dict[str, list[nn.Parameter]] = {}
        for name, parameter in model.named_parameters():
            group = group_of(name, self.groups)
            if name in sparse_names:
                sparse_buckets.setdefault(group, []).append(parameter)
                continue
            decays = parameter.ndim >= 2 and 'norm' not in name and 'ln_' not in name
            buckets.setdefault((group, decays), []).append(parameter)
        optimizer_cfg['params'] = [dict(params=params, name=group,
                                        **(decay if decays else dict(weight_decay=0.0)))
                                   for (group, decays), params in sorted(buckets.items())]
        if cfg.get('compiled_step') is not None:
            optimizer_cfg = traceable_by_default(optimizer_cfg)
        else:
            optimizer_cfg = fused_by_default(optimizer_cfg,
                                             [p for params in buckets.values() for p in params])
        optimizer = OPTIMIZERS.build(optimizer_cfg)
        if sparse_buckets:
            # The dense optimiser's own betas and eps, its defaults where the config gives
            # none (BertAdam's eps is 1e-6, SparseAdam's 1e-8).
            sparse_cfg = dict(self.sparse_optimizer_cfg or dict(
                type='SparseAdam', betas=optimizer.defaults.get('betas', (0.9, 0.999)),
                eps=optimizer.defaults.get('eps', 1e-8)))
            sparse_cfg.setdefault('lr', optimizer_cfg.get('lr', 1e-3))
            sparse_cfg['params'] = [dict(params=params, name=group)
                                    for group, params in sorted(sparse_buckets.items())]
            optimizer = HybridOptimizer(optimizer, OPTIMIZERS.build(sparse_cfg))
        cfg.setdefault('type', 'OptimWrapper')
        wrapper = OPTIM_WRAPPERS.build(cfg, default_args=dict(optimizer=optimizer))
        with_sparse = {nn.utils.clip_grad_norm_: clip_grad_norm_with_sparse,
                       nn.utils.clip_grad_value_: clip_grad_value_with_sparse}
        if sparse_buckets and getattr(wrapper, 'clip_func', None) in with_sparse:
            wrapper.clip_func = with_sparse[wrapper.clip_func]
        return wrapper
