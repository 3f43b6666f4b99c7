"""A training phase as configured: its fields, their checks and its learning-rate schedule."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from xmr.utils.cli import UserKeyError
from xmr.utils.counts import is_count, is_finite_number

SCHEDULES = ('cosine', 'linear', 'constant', 'bert_cosine')


def phase_lr_factor(step: int, total: int, warmup_ratio: float, schedule: str,
                    min_ratio: float = 0.0) -> float:
    """Multiplier of a phase's base learning rate at ``step`` (0-based) of ``total``.

    Linear warm-up over the first ``warmup_ratio`` of the phase (DASD: 10%), from ``1/W`` to 1,
    then ``schedule``: ``cosine`` or ``linear`` decay to ``min_ratio``, or ``constant``. Each phase
    starts from its own base learning rate, so schedules never stack across phases.
    ``bert_cosine`` is BERT's ``warmup_cosine``, which DASD's released code runs
    (:func:`bert_cosine_factor`).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule '{schedule}'; choose from {SCHEDULES}")
    if schedule == 'bert_cosine':
        return bert_cosine_factor(step / total, warmup_ratio, min_ratio)
    # Half up: round() takes a half to the even number (4.5 of 45 iterations gave 4).
    warmup = math.floor(warmup_ratio * total + 0.5)
    if step < warmup:
        return (step + 1) / warmup
    if schedule == 'constant' or total <= warmup + 1:
        return 1.0
    progress = (step - warmup) / (total - warmup - 1)
    decay = 0.5 * (1 + math.cos(math.pi * progress)) if schedule == 'cosine' else 1 - progress
    return min_ratio + (1 - min_ratio) * decay


def bert_cosine_factor(progress: float, warmup_ratio: float, min_ratio: float = 0.0) -> float:
    """BERT's ``warmup_cosine`` at ``progress = step / total``: ``progress / warmup_ratio``
    during the warm-up (0 at the first step, as in the reference, whose first update is lost),
    then ``0.5 (1 + cos(pi progress))`` with ``progress`` counted from the phase's start, so the
    rate falls from 1 to ``cos^2(pi W / 2)`` as the warm-up ends (0.976 for ``W = 0.1``) and
    is 0.5 at mid-phase; decaying to ``min_ratio``."""
    if progress < warmup_ratio:
        return progress / warmup_ratio
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@dataclass
class Phase:
    """One alignment phase, as configured.

    Attributes:
        name: ``source_finetune``, ``cross_lingual``, ``cross_modal`` or any other label, one
            per phase (:func:`check_phase_names`).
        lr: base learning rate of the phase.
        trainable: parameter-name prefixes that train in this phase; everything else is frozen.
        loss_weights: ``{loss name: weight}`` passed to the model's ``set_phase``.
        iters: number of iterations; a phase gives either ``iters`` or ``epochs``.
        epochs: number of passes over the phase's dataloader; the loop sets
            ``iters = epochs x len(dataloader)`` when it is built.
        dataloader: dataloader config of the phase, or the name of the top-level config key
            holding it (``'text_train_dataloader'``); ``None``: the runner's train_dataloader.
        warmup_ratio: fraction of ``iters`` with linear warm-up.
        schedule: decay after warm-up (``cosine``, ``linear``, ``constant``), or
            ``bert_cosine``, the authors' (:func:`bert_cosine_factor`).
        min_lr_ratio: floor of the decay, as a fraction of ``lr``.
        lr_mult: ``{parameter-group name: multiplier}``.
        validate_at_start: run validation before the phase's first step (a "before" row).
        cache_features: read the frozen towers' features (``r^S`` of each source caption,
            ``r^V`` of fixed media) from a feature cache built at the phase's start with the
            live weights, under ``<work_dir>/feature_cache/<name>``; a dict gives
            :class:`~xmr.engine.feature_cache.CachedFeatureDataset` options (``cache_dir``,
            ``dtype``, ``batch_size``, ...). The run's own cache is rebuilt when stale; a
            named ``cache_dir`` is refused then, unless ``rebuild_if_stale=True``. Refused
            when the phase trains the backbone.
        start_from_best: a validation metric (greater is better, e.g. ``'mAR'``): the phase
            starts from the trained weights of the previous phase's best validation by it, as
            DASD's authors start the cross-modal stage (:mod:`xmr.engine.phase_best`);
            ``None``: from the previous phase's last weights.
        start: first global iteration of the phase (filled in by the loop).
    """

    name: str
    lr: float
    trainable: Sequence[str]
    loss_weights: dict[str, float]
    iters: int | None = None
    epochs: int | None = None
    dataloader: dict | str | None = None
    warmup_ratio: float = 0.1
    schedule: str = 'cosine'
    min_lr_ratio: float = 0.0
    lr_mult: dict[str, float] = field(default_factory=dict)
    validate_at_start: bool = False
    cache_features: bool | dict = False
    start_from_best: str | None = None
    start: int = 0

    def __post_init__(self) -> None:
        check_phase_values(self)

    @classmethod
    def from_config(cls, index: int, cfg: Mapping[str, Any]) -> Phase:
        """The phase of a ``train_cfg.phases`` entry, its keys and values checked.

        Raises:
            KeyError: a required key is missing or a key is unknown (naming the phase).
            ValueError: the entry is no dict, or a value has the wrong type or range (naming
                the phase, key and value).
        """
        if not isinstance(cfg, Mapping):
            raise ValueError(f'train_cfg.phases.{index}={cfg!r}: a phase is a dict (dict(name=..., '
                             'lr=..., trainable=[...], loss_weights=dict(...)))')
        label = f'phase {index}' + (f' ({cfg["name"]})' if 'name' in cfg else '')
        missing = {'name', 'lr', 'trainable', 'loss_weights'} - set(cfg)
        if missing:
            raise UserKeyError(
                f'{label} lacks {sorted(missing)}; a config that sets train_cfg.phases replaces '
                "its base's list whole, so restate each phase "
                f"(dict(_base_.train_cfg.phases[{index}], iters=...)), or change one key with "
                f'--cfg-options train_cfg.phases.{index}.iters=...')
        known = {f.name for f in fields(cls)} - {'start'}
        unknown = set(cfg) - known
        if unknown:
            raise UserKeyError(f'{label}: unknown keys {sorted(unknown)}; a phase has '
                               f'{sorted(known)}')
        return cls(**cfg)

    @property
    def end(self) -> int:
        return self.start + self.iters

    def trains(self, name: str) -> bool:
        """Whether the parameter ``name`` lies under one of the phase's ``trainable`` prefixes."""
        return any(under_prefix(name, prefix) for prefix in self.trainable)

    def schedule_record(self) -> dict[str, Any]:
        """What the phase trains and how, as plain data a checkpoint keeps: its name,
        iterations, trainable prefixes, losses and learning-rate schedule."""
        return dict(name=self.name, start=self.start, end=self.end, lr=float(self.lr),
                    warmup_ratio=float(self.warmup_ratio), schedule=self.schedule,
                    min_lr_ratio=float(self.min_lr_ratio),
                    lr_mult={k: float(v) for k, v in sorted(self.lr_mult.items())},
                    trainable=sorted(self.trainable),
                    loss_weights={k: float(v) for k, v in sorted(self.loss_weights.items())},
                    # Only when set: the records of checkpoints written before it stay equal.
                    **({} if self.start_from_best is None
                       else dict(start_from_best=self.start_from_best)))


def under_prefix(name: str, prefix: str) -> bool:
    """Whether the parameter ``name`` is ``prefix`` or lies in the module it names."""
    return name == prefix or name.startswith(prefix + '.')


def check_phase_names(phases: Sequence[Phase]) -> None:
    """Each phase has a name of its own: the phase report's columns, the best weights that
    ``start_from_best`` starts from and the logs are by name, so a phase named as an earlier
    one took its place there (its results in the other's column, the other's gone).

    Raises:
        ValueError: naming both phases and the name.
    """
    first: dict[str, int] = {}
    for index, phase in enumerate(phases):
        earlier = first.setdefault(phase.name, index)
        if earlier != index:
            raise ValueError(f'train_cfg.phases.{earlier} and train_cfg.phases.{index} are both '
                             f"named '{phase.name}'; give each phase a name of its own (the "
                             'phase report and the best weights of start_from_best are by name)')


def _check_weights(phase: str, key: str, weights: Any) -> None:
    """``weights`` is a ``{name: finite number >= 0}`` mapping (``loss_weights``, ``lr_mult``)."""
    if not isinstance(weights, Mapping):
        # --cfg-options parses no dict literal: it hands the whole '{...}' over as a string.
        hint = (f' (--cfg-options takes no dict: set one entry at a time, --cfg-options '
                f'train_cfg.phases.N.{key}.NAME=NUMBER)' if isinstance(weights, str) else '')
        raise ValueError(f'phase {phase}: {key} must be a dict of name: number, got '
                         f'{weights!r}{hint}')
    for name, weight in weights.items():
        if not isinstance(name, str):
            raise ValueError(f'phase {phase}: {key} is keyed by {name!r}; its keys name a loss '
                             "or a parameter group, as strings (e.g. 'disentangler')")
        if not is_finite_number(weight) or weight < 0:
            raise ValueError(f'phase {phase}: {key}[{name!r}]={weight!r} must be a finite '
                             'number >= 0')


def check_phase_values(phase: Phase) -> None:
    """Types and ranges of every field of a phase, before anything trains.

    Raises:
        ValueError: naming the phase, the key and the value at fault.
    """
    _check_phase_name(phase.name)
    _check_schedule(phase)
    _check_trained_parts(phase)
    _check_phase_setup(phase)


def _check_phase_name(name: Any) -> None:
    """A non-empty name that names no folder: the run's files of the phase are named by it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f'phase name must be a non-empty string, got {name!r}')
    if any(separator in name for separator in ('/', '\\')) or name in ('.', '..'):
        # A folder or a file outside the run's: the best's other files are not found to be
        # removed (about 0.5 GB each for DASD), and '../x' writes beside the work dir.
        raise ValueError(f'phase name {name!r} names files of the run '
                         '(phase_best/<name>_iter_N.pth, feature_cache/<name> for a dataloader '
                         "written in the phase): give one without '/' or '\\', not '.' or "
                         "'..', e.g. 'cross_lingual_de'")


def _check_schedule(phase: Phase) -> None:
    """The learning-rate curve of the phase: its peak ``lr``, its length in ``iters`` or
    ``epochs``, its warm-up and floor ratios and its ``schedule``."""
    name = phase.name
    if not is_finite_number(phase.lr) or phase.lr <= 0:
        raise ValueError(f'phase {name}: lr={phase.lr!r} must be a positive number, e.g. 1e-4')
    if (phase.iters is None) == (phase.epochs is None):
        raise ValueError(f'phase {name}: give exactly one of iters and epochs, got '
                         f'iters={phase.iters!r}, epochs={phase.epochs!r} (to give epochs in '
                         'place of a base config\'s iters, set iters=None)')
    for length in ('iters', 'epochs'):
        value = getattr(phase, length)
        if value is not None and not is_count(value):
            raise ValueError(f'phase {name}: {length} must be a positive integer, got {value!r}')
    ratios = (('warmup_ratio', phase.warmup_ratio, '[0, 1)', lambda r: 0 <= r < 1),
              ('min_lr_ratio', phase.min_lr_ratio, '[0, 1]', lambda r: 0 <= r <= 1))
    for key, value, interval, inside in ratios:
        if not is_finite_number(value) or not inside(value):
            raise ValueError(f'phase {name}: {key}={value!r} must be a number in {interval}')
    if phase.schedule not in SCHEDULES:
        raise ValueError(f'phase {name}: unknown schedule {phase.schedule!r}; choose from '
                         f'{SCHEDULES}')


def _check_trained_parts(phase: Phase) -> None:
    """What the phase trains: its ``trainable`` prefixes, the ``loss_weights`` of which one at
    least is positive, and the ``lr_mult`` of its parameter groups."""
    name, trainable = phase.name, phase.trainable
    if (isinstance(trainable, str) or not isinstance(trainable, Sequence) or not trainable
            or not all(isinstance(p, str) and p for p in trainable)):
        raise ValueError(f'phase {name}: trainable={trainable!r} must be a non-empty list of '
                         "parameter-name prefixes, e.g. ['language_branch']")
    _check_weights(name, 'loss_weights', phase.loss_weights)
    if not any(phase.loss_weights.values()):
        raise ValueError(f'phase {name}: loss_weights={phase.loss_weights!r} gives no loss a '
                         'positive weight; the phase would train nothing')
    _check_weights(name, 'lr_mult', phase.lr_mult)


def _check_phase_setup(phase: Phase) -> None:
    """How the phase starts and reads its data: ``validate_at_start``, ``cache_features``,
    ``start_from_best`` and ``dataloader``."""
    name = phase.name
    if not isinstance(phase.validate_at_start, bool):
        raise ValueError(f'phase {name}: validate_at_start={phase.validate_at_start!r} must be '
                         'True or False')
    if not isinstance(phase.cache_features, (bool, Mapping)):
        raise ValueError(f'phase {name}: cache_features={phase.cache_features!r} must be True, '
                         'False or a dict of CachedFeatureDataset options')
    if not isinstance(phase.start_from_best, (str, type(None))) or phase.start_from_best == '':
        raise ValueError(f'phase {name}: start_from_best={phase.start_from_best!r} must be a '
                         "validation metric's name (e.g. 'mAR') or None")
    if not isinstance(phase.dataloader, (str, Mapping, type(None))):
        raise ValueError(f'phase {name}: dataloader={phase.dataloader!r} must be a dataloader '
                         'dict or the name of a top-level config key holding one')
