"""An optimiser with one named parameter group per module group, for phased training."""
from __future__ import annotations

from collections.abc import Sequence

from mmengine.optim import OptimWrapper
from torch import nn

from xmr.registry import OPTIM_WRAPPER_CONSTRUCTORS, OPTIM_WRAPPERS, OPTIMIZERS

DEFAULT_GROUPS = ('backbone', 'language_branch.embedding', 'language_branch.adapters',
                  'disentangler', 'losses')


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


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class PhasedOptimWrapperConstructor:
    """Builds the optimiser over every parameter a phase may train, grouped by module.

    Frozen parameters are included: a later phase unfreezes them (``requires_grad``), and a
    parameter without a gradient is skipped by the optimiser step. Groups carry a ``name`` so a
    phase can scale one group's learning rate (``lr_mult``); weight decay is not applied to
    biases, norms, embeddings' padding and 0/1-d parameters.

    Args:
        optim_wrapper_cfg: MMEngine's ``optim_wrapper`` config (``type``, ``optimizer``, ...).
        paramwise_cfg: may hold ``groups`` (prefixes, default :data:`DEFAULT_GROUPS`).
    """

    def __init__(self, optim_wrapper_cfg: dict, paramwise_cfg: dict | None = None) -> None:
        self.optim_wrapper_cfg = dict(optim_wrapper_cfg)
        self.groups = tuple((paramwise_cfg or {}).get('groups', DEFAULT_GROUPS))

    def __call__(self, model: nn.Module) -> OptimWrapper:
        model = getattr(model, 'module', model)
        cfg = dict(self.optim_wrapper_cfg)
        optimizer_cfg = dict(cfg.pop('optimizer'))
        weight_decay = optimizer_cfg.get('weight_decay', 0.0)
        buckets: dict[tuple[str, bool], list[nn.Parameter]] = {}
        for name, parameter in model.named_parameters():
            decays = parameter.ndim >= 2 and 'norm' not in name and 'ln_' not in name
            buckets.setdefault((group_of(name, self.groups), decays), []).append(parameter)
        param_groups = [dict(params=params, name=group,
                             weight_decay=weight_decay if decays else 0.0)
                        for (group, decays), params in sorted(buckets.items())]
        optimizer_cfg['params'] = param_groups
        optimizer = OPTIMIZERS.build(optimizer_cfg)
        cfg.setdefault('type', 'OptimWrapper')
        return OPTIM_WRAPPERS.build(cfg, default_args=dict(optimizer=optimizer))
