"""The config a tool runs: the file, its ablations, ``--cfg-options`` and the work directory.

``tools/train.py``, ``tools/test.py`` and ``tools/cache_features.py`` load their config through
:func:`load_run_config`, so that the three agree on what a run is (and a feature cache built
ahead of time lies where training looks for it).
"""
from __future__ import annotations

import argparse
import difflib
import inspect
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mmengine.config import Config, DictAction

from xmr.ablations import (
    ablation_path,
    ablation_suffix,
    apply_ablations,
    list_items_replaced,
)
from xmr.config_files import read_config_file
from xmr.config_variables import (
    nested_values,
    runner_keys,
    stale_copies,
    variable_copies,
)
from xmr.packaged import CONFIG_SCHEME, config_path
from xmr.utils.cli import (
    GatherAction,
    UserError,
    UserKeyError,
    did_you_mean,
    given_file,
    import_user_module,
    quiet_on_other_processes,
)
from xmr.utils.listing import first_few

__all__ = ['DEFAULT_WORK_DIR', 'add_config_arguments', 'check_annotation_files',
           'check_evaluation_keys', 'check_run_values', 'config_file', 'load_run_config',
           'loader_datasets', 'merge_options', 'present_train_datasets']


#: Where a run writes without ``--work-dir`` (:func:`~xmr.engine.work_dir.resolve_work_dir`),
#: as the tools' help says it.
DEFAULT_WORK_DIR = ("the config's work_dir, else work_dirs/<config name>; either with "
                    "[_<ablation>...]")


#: A value MMEngine's parser keeps as text that was meant as a dict: ``dict(k=v)``, ``{k: v}``.
_DICT_AS_TEXT = re.compile(r'\s*(\{.*:.*\}|[A-Za-z_]\w*\(.*\))\s*', re.S)


def _texts(value: Any) -> Iterator[str]:
    """The strings of a parsed ``--cfg-options`` value, inside lists and tuples too."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _texts(item)


class ConfigOptionsAction(DictAction):
    """MMEngine's ``--cfg-options KEY=VALUE ...`` parser, refusing a value it cannot read by name.

    MMEngine's parser reads a value in brackets as a list or tuple of plain values; it recurses
    without end on a call inside one (``[dict(...)]``), keeps ``dict(k=v)`` or ``{k: v}`` as
    text (which a config check took for a value, and the runner failed on after writing its
    work dir), fails on an item without ``=`` with Python's unpacking error and on unpaired
    brackets with a bare assertion, naming neither the value nor what to write. It also deletes
    every space: a plain value keeps its own here (``text='a photo of'``).
    """

    def _refuse_dict(self, value: str) -> argparse.ArgumentError:
        return argparse.ArgumentError(
            self, f"{value!r}: --cfg-options reads plain values and lists or tuples of them "
            "('[de,fr]', '(1,2)'), not dict(...), {...} or other calls; set a dict's keys one "
            'at a time (train_cfg.phases.0.iters=2; KEY._delete_=True first to drop the keys '
            'it had) or write the change in a config whose _base_ is this one')

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        # As typed, for a tool that passes them on (``tools/train.py --test``).
        namespace.cfg_options_given = [*getattr(namespace, 'cfg_options_given', []), *values]
        for value in values:
            if '=' not in value:
                raise argparse.ArgumentError(self, f'{value!r} is no KEY=VALUE')
            if '' in value.split('=', 1)[0].split('.'):
                raise argparse.ArgumentError(self, f'{value!r}: its KEY has an empty part; '
                                             'write it as a.b.c (train_cfg.phases.0.iters)')
            try:
                super().__call__(parser, namespace, [value], option_string)
            except RecursionError:
                raise self._refuse_dict(value) from None
            except AssertionError:  # MMEngine's, on brackets that do not pair up
                raise argparse.ArgumentError(
                    self, f'{value!r}: its brackets do not pair up') from None
            key, text = value.split('=', 1)
            options = getattr(namespace, self.dest)
            if any(_DICT_AS_TEXT.fullmatch(item) for item in _texts(options[key])):
                raise self._refuse_dict(value)
            text = text.strip().strip('\'"')
            if ' ' in text and not text.startswith(('[', '(')) and ',' not in text:
                # MMEngine deletes the spaces: 'a photo of' was read as 'aphotoof'.
                options[key] = DictAction._parse_int_float_bool(text)


def add_config_arguments(parser: argparse.ArgumentParser,
                         example: str = 'model.language_branch.num_blocks=6',
                         named_by: str | None = 'the default work dir') -> None:
    """``--ablation NAME [NAME ...]`` (the paper rows to apply, :mod:`xmr.ablations`) and
    ``--cfg-options KEY=VALUE ...``, which :func:`load_run_config` merges in that order.

    Args:
        parser: the tool's parser.
        example: the ``--cfg-options`` example its help shows.
        named_by: what of the tool's output adds the ablations' names, as its help says
            (``None`` for a tool that names nothing after them).
    """
    parser.add_argument('--ablation', nargs='+', action=GatherAction, default=[], metavar='NAME',
                        help="paper ablations applied to the config, in order: '<method>/<row>' "
                        "(e.g. dasd/no-sc; configs/<method>/ablations/) or a .py file"
                        + ('' if named_by is None else f'; {named_by} adds their names'))
    parser.add_argument('--cfg-options', nargs='+', action=ConfigOptionsAction,
                        help=f'override config keys, e.g. {example}')


def add_launcher_arguments(parser: argparse.ArgumentParser, doing: str) -> None:
    """``--launcher`` (MMEngine's: ``none``, ``pytorch`` under torchrun, ``slurm``, ``mpi``) and
    the ``--local_rank`` that ``torch.distributed.launch`` passes, for a tool ``doing`` its work
    on every process of a job (``'training'``). Its usage errors are printed by one process a
    node (:func:`~xmr.utils.cli.quiet_on_other_processes`)."""
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help=f'job launcher for distributed {doing}')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0,
                        help="this process's rank on its node, which torch.distributed.launch "
                        'passes; not for a command typed by hand')
    quiet_on_other_processes(parser)


def import_custom_modules(config: str | os.PathLike, cfg: Config) -> None:
    """Import the modules of ``cfg.custom_imports`` (those already imported are not again).

    MMEngine imports those of a config file as it loads it, and never those an ``--ablation``
    row or ``--cfg-options`` adds (their types were unknown at the build, a misspelt module
    went unnoticed), so :func:`load_run_config` calls this on the file's config and on the
    merged one.

    Raises:
        UserError: naming the config and the module that failed to import, and why
            (:func:`~xmr.utils.cli.import_user_module`).
    """
    if not cfg.get('custom_imports'):
        return
    options = dict(cfg.custom_imports)
    modules = options.pop('imports', [])
    for module in [modules] if isinstance(modules, str) else modules:
        import_user_module(module, f'{config}: custom_imports', **options)


def config_file(config: str | os.PathLike, key: str = 'CONFIG') -> str | os.PathLike:
    """The file ``config`` names (``xmr::<path>``: the packaged config).

    Args:
        config: the config as given.
        key: where it was given (the tools' ``CONFIG``, the API's ``config``), for the messages.

    Raises:
        UserError: no such file, a folder or an unreadable one (:func:`~xmr.utils.cli.given_file`),
            or one of a kind MMEngine reads no config from (:data:`CONFIG_SUFFIXES`; its own
            error named no file: a checkpoint given first).
    """
    if str(config).startswith(CONFIG_SCHEME):
        config = config_path(str(config))
    given_file(config, key, 'give the path of a config file, or name a config xmr ships as '
               f"'{CONFIG_SCHEME}demo/static_tiny-clip_synthetic.py'")
    suffix = os.path.splitext(config)[1]
    if suffix not in CONFIG_SUFFIXES:
        raise UserError(config, f'is no config file (a config is a {", ".join(CONFIG_SUFFIXES)} '
                        'file)', 'give the config first, then the checkpoint: tools/test.py '
                        'CONFIG CHECKPOINT' if suffix == '.pth' else 'give the path of a .py '
                        'config, such as configs/demo/static_tiny-clip_synthetic.py')
    return config


#: The files MMEngine's ``Config.fromfile`` reads.
CONFIG_SUFFIXES = ('.py', '.json', '.yml', '.yaml')


#: MMEngine's refusal of a dict that merges into a list, when the dict's keys are indices.
_INDEX_OVERLAY = re.compile(r"^(\w+)=\{('(?:\d+|\*)'|\d+): .* is a dict in the child config "
                            r"but is of type <class '(list|tuple)'> in base config")


def list_overlaid_by_index(config: str | os.PathLike, error: TypeError) -> UserError | None:
    """A child config that overlays a list's items by index (``phases={'1': dict(lr=...)}``,
    or ``{1: ...}``), which only ``--ablation`` rows do, as a :class:`UserError` with the ways
    that work; MMEngine's own message advises ``_delete_=True``, which drops the base's list.
    ``None`` for another error.
    """
    found = _INDEX_OVERLAY.match(str(error))
    if found is None:
        return None
    key, written = found.group(1), found.group(2)
    index = written.strip("'")
    item = index if index.isdigit() else '0'
    return UserError(config, f'{key}={{{written}: ...}} overlays a list of its base by index, '
                     "which only --ablation rows do; a child config replaces a list whole",
                     f'restate the list with each item (dict(_base_.<...>.{key}[{item}], '
                     f'lr=...)), or change one key with --cfg-options <...>.{key}.{item}.lr=...')


def load_run_config(config: str | os.PathLike, *, ablations: Sequence[str] = (),
                    cfg_options: Mapping[str, Any] | None = None,
                    work_dir: str | None = None) -> Config:
    """Load ``config``, merge ``ablations`` then ``cfg_options``, and set ``cfg.work_dir``.

    Args:
        config: the config file, or ``xmr::<path under configs/>`` for a config xmr ships.
        ablations: as :func:`xmr.ablations.apply_ablations` takes them.
        cfg_options: ``--cfg-options`` (dotted keys).
        work_dir: ``--work-dir``; by default ``work_dirs/<config name>[_<ablation>...]``.

    Raises:
        UserError: the config file is missing or a folder, a module of its ``custom_imports``
            failed to import, or an option indexes past a list's end.
        UnknownOptionError, ValueError, KeyError: a value :func:`check_run_values` refuses.
    """
    config = config_file(config)
    try:
        loaded = read_config_file(config)
    except TypeError as error:
        explained = list_overlaid_by_index(config, error)
        if explained is None:
            raise
        raise explained from error
    # The file's own first, as MMEngine would: a row or an option may replace the list.
    import_custom_modules(config, loaded)
    own_keys = set(loaded)
    cfg = apply_ablations(loaded, ablations)
    typo = _check_option_keys(cfg, cfg_options or {})
    _refuse_copied_variables(cfg, cfg_options or {})
    held = set(cfg)
    merge_options(cfg, cfg_options or {})
    _refuse_top_level_typos(cfg, config, cfg_options or {}, own_keys, ablations)
    _refuse_unread_new_values(cfg, held, cfg_options or {})
    import_custom_modules(f'{config} with its --ablation rows and --cfg-options', cfg)
    check_run_values(cfg)
    _refuse_optimizer_lr_option(cfg, cfg_options or {})
    if typo is not None:
        raise typo
    # Here, not at the top: xmr.engine loads torch and every engine module, which neither a
    # tool's --help nor a missing config's error should wait for.
    from xmr.engine.work_dir import resolve_work_dir

    resolve_work_dir(cfg, config, work_dir, suffix=ablation_suffix(ablations))
    return cfg


def check_run_values(cfg: Config) -> None:
    """Refuse, as the config loads, what MMEngine's runner would find only once built or
    iterations in: an option a type does not take, a value of another kind than its default (a
    word where a number goes; the model's and every registered part's inside it, the
    optimiser's and its wrapper's, the hooks', the loops' and the samplers' options), a seed
    that is no integer, a bad phase, a batch size that is no positive integer, a negative
    learning rate, a value of MMEngine's logger or checkpoint hook that it refuses naming no key
    or silently reads as another (:func:`_check_mmengine_hook_values`), a count in epochs that
    no loop would resolve (:func:`_check_epoch_counts`), a flag of the runner's own that is no
    ``True`` or ``False`` (:data:`RUNNER_FLAGS`), a phase's dataloader key that names no
    dataloader of the config, MMEngine's ``auto_scale_lr`` under the phased loop, which would
    overwrite its scaling, a language code that names no language
    (:func:`_check_language_codes`), a model that is no dict.

    MMEngine's runner builds the model, hooks, loops, datasets and metrics itself, past the
    option check of xmr's registries, after it has made the work dir; their own options, and
    those of the parts the model builds (:func:`~xmr.registry.check_part_options`), are checked
    here.

    Raises:
        UnknownOptionError: naming the type, the option and the ones it takes.
        ValueError: naming the key and its value.
        KeyError: a phase's missing or unknown keys.
    """
    from xmr.registry import (
        DATA_SAMPLERS,
        DATASETS,
        HOOKS,
        LOOPS,
        METRICS,
        MODELS,
        OPTIM_WRAPPERS,
        OPTIMIZERS,
        check_part_options,
    )

    if 'model' in cfg and not isinstance(cfg.model, Mapping):
        raise ValueError(f'model={cfg.model!r}: the runner builds the model from a dict with '
                         "a type (model=dict(type='CrossLingualRetriever', ...)); set its keys "
                         'instead (--cfg-options model.<key>=...)')
    check_part_options(MODELS, cfg.get('model'), 'model')
    OPTIMIZERS.check_options((cfg.get('optim_wrapper') or {}).get('optimizer'))
    OPTIM_WRAPPERS.check_options(_wrapper_options(cfg.get('optim_wrapper')))
    _check_optim_constructor(cfg.get('optim_wrapper'))
    _check_optimizer((cfg.get('optim_wrapper') or {}).get('optimizer'))
    for where, loader in _dataloaders(cfg).items():
        _check_loader_options(where, loader)
        _check_loader_counts(where, loader)
        DATASETS.check_options(loader.get('dataset'), whole=True)
        for sampler in ('sampler', 'batch_sampler'):
            DATA_SAMPLERS.check_options(loader.get(sampler))
    for metric in _metrics(cfg).values():
        METRICS.check_options(metric, whole=True)
    for where, hook in _hooks(cfg).items():
        HOOKS.check_options(hook, whole=True)
        _check_mmengine_hook_values(where, hook, cfg.get('train_cfg'))
    for loop in ('train_cfg', 'val_cfg', 'test_cfg'):
        LOOPS.check_options(cfg.get(loop))
    _check_epoch_counts(cfg)
    _check_language_codes(cfg.to_dict())
    for where, metric in _metrics(cfg).items():  # after the codes, which their keys name
        _check_metric_values(where, metric)
    _check_runner_flags(cfg)
    _check_seed((cfg.get('randomness') or {}).get('seed'))
    if (cfg.get('train_cfg') or {}).get('type') == 'PhasedTrainLoop':
        _check_phased_loop(cfg)


def _check_language_codes(node: Any, key: str = '') -> None:
    """Refuse an unknown language code in any list of them (a key ending in ``languages`` or
    ``langs``: a dataset's, a metric's, the model's, a config's variable), naming its key: a
    dataset refused it only as the runner built it, after the work dir was made.

    Raises:
        LanguageCodeError: ``<key>: unknown language code 'xx'; closest: ...``.
    """
    from xmr.datasets.languages import normalize_languages

    items: Any = node.items() if isinstance(node, Mapping) else (
        enumerate(node) if isinstance(node, (list, tuple)) else ())
    for name, value in items:
        path = f'{key}.{name}' if key else str(name)
        if (isinstance(name, str) and name.endswith(('languages', 'langs'))
                and isinstance(value, (list, tuple)) and all(isinstance(c, str) for c in value)):
            normalize_languages(value, path)
        else:
            _check_language_codes(value, path)


def _check_seed(seed: Any) -> None:
    """``randomness.seed`` is ``None`` or an integer of NumPy's range, whose error names no
    key."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                             or not 0 <= seed < 2**32):
        raise ValueError(f'randomness.seed={seed!r} must be an integer from 0 to 2**32 - 1 (or '
                         'None for a random one)')


def _check_phased_loop(cfg: Config) -> None:
    """The phases of a ``PhasedTrainLoop`` config, each phase's dataloader key, and no
    ``param_scheduler`` or ``auto_scale_lr`` beside them.

    Raises:
        KeyError: a phase's missing or unknown keys.
        ValueError: naming the phase, the key and its value.
    """
    from xmr.engine.loops import refuse_param_scheduler, resolve_dataloader_key
    from xmr.engine.phases import Phase, check_phase_names

    phases = [Phase.from_config(index, phase)
              for index, phase in enumerate(cfg.get('train_cfg').get('phases') or [])]
    check_phase_names(phases)
    # The loop resolves these as the runner trains, after it has made the work dir (a
    # timestamped log folder, the config dump): a misspelt key left them in a work dir
    # that may hold an earlier run.
    for phase in phases:
        if isinstance(phase.dataloader, str):
            resolve_dataloader_key(cfg, phase.dataloader, phase.name)
    refuse_param_scheduler(cfg.get('param_scheduler'))
    if (cfg.get('auto_scale_lr') or {}).get('enable'):
        # MMEngine scales the optimiser's groups, and logs it; the loop then sets each
        # group's lr from its phase every iteration, unscaled.
        raise ValueError(f"auto_scale_lr={dict(cfg.auto_scale_lr)!r}: PhasedTrainLoop sets "
                         "every iteration's lr from its phase, so MMEngine's scaling would "
                         'be logged and lost; scale train_cfg.phases.N.lr to the batch size '
                         'instead and drop auto_scale_lr')


#: Keys MMEngine's runner (and ``tools/train.py``, ``resume``) reads as flags, which no
#: registered type's defaults check: ``--cfg-options resume=no`` is the text 'no', which they
#: read as true (``--cfg-options`` reads True, False and None alone).
RUNNER_FLAGS = ('resume', 'randomness.deterministic', 'randomness.diff_rank_seed',
                'env_cfg.cudnn_benchmark', 'log_processor.by_epoch')


def _check_runner_flags(cfg: Config) -> None:
    """Each of :data:`RUNNER_FLAGS` the config sets is ``True``, ``False`` or ``None``.

    Raises:
        ValueError: naming the key and its value.
    """
    for key in RUNNER_FLAGS:
        section, _, name = key.rpartition('.')
        holder = cfg.get(section) if section else cfg
        value = holder.get(name) if isinstance(holder, (Config, Mapping)) else None
        if value is not None and not isinstance(value, bool):
            raise ValueError(f'{key}={value!r} must be True or False (a word such as no or off '
                             f'is text, which reads as true): --cfg-options {key}=False')


def _check_optim_constructor(optim_wrapper: Any) -> None:
    """Refuse an ``optim_wrapper.constructor`` name no registry holds: MMEngine looks it up as
    the runner builds the optimiser, after the work dir is made.

    Raises:
        UserKeyError: naming the key and the registered names nearest to it.
    """
    from xmr.registry import OPTIM_WRAPPER_CONSTRUCTORS

    name = optim_wrapper.get('constructor') if isinstance(optim_wrapper, Mapping) else None
    if isinstance(name, str):
        try:
            OPTIM_WRAPPER_CONSTRUCTORS.get(name)
        except UserKeyError as error:
            raise UserKeyError(f'optim_wrapper.constructor: {error.args[0]}') from None


def _wrapper_options(optim_wrapper: Any) -> Any:
    """The options of ``optim_wrapper`` its wrapper takes: the constructor's own keys left
    out (``constructor``, ``paramwise_cfg``, the ``optimizer`` it builds), its type
    MMEngine's default where it names none."""
    if not isinstance(optim_wrapper, Mapping):
        return optim_wrapper
    return {'type': 'OptimWrapper', **{key: value for key, value in optim_wrapper.items()
                                       if key not in ('constructor', 'paramwise_cfg',
                                                      'optimizer')}}


def _dataloaders(cfg: Config) -> dict[str, Mapping[str, Any]]:
    """Every dataloader dict of ``cfg`` by its key: the ``*_dataloader(s)`` keys (a dict or a
    list of them, as MultiDatasetValLoop takes: ``val_dataloader.1``) and the phases' own
    (``train_cfg.phases.0.dataloader``)."""
    found: dict[str, Any] = {}
    for key, value in cfg.items():
        if key.endswith(('_dataloader', '_dataloaders')):
            found.update(_loader_items(key, value))
    for index, phase in enumerate((cfg.get('train_cfg') or {}).get('phases') or []):
        if isinstance(phase, Mapping):
            found[f'train_cfg.phases.{index}.dataloader'] = phase.get('dataloader')
    return {key: loader for key, loader in found.items() if isinstance(loader, Mapping)}


def check_evaluation_keys(cfg: Config, split: str) -> None:
    """``<split>_dataloader``, ``<split>_evaluator`` and ``<split>_cfg`` are given all three or
    none, as MMEngine's runner needs them (it says so printing the whole loader, the key at
    fault last); the tools that build no runner (``cache_features.py``) take a loader alone.

    Raises:
        UserError: naming the keys given and those missing.
    """
    keys = [f'{split}_dataloader', f'{split}_evaluator', f'{split}_cfg']
    missing = [key for key in keys if cfg.get(key) is None]
    if missing and len(missing) < len(keys):
        given = [key for key in keys if key not in missing]
        raise UserError(', '.join(missing), f"{'is' if len(missing) == 1 else 'are'} None "
                        f"while {' and '.join(given)} {'is' if len(given) == 1 else 'are'} "
                        f'set; the {split} loop needs all three',
                        f"give {' and '.join(_example(key) for key in missing)}, or set all "
                        'three to None')


def _example(key: str) -> str:
    loop = key.partition('_')[0].capitalize() + 'Loop'
    examples = {'_evaluator': "dict(type='RetrievalMetric')", '_cfg': f"dict(type='{loop}')"}
    return next((f'{key} = {example}' for suffix, example in examples.items()
                 if key.endswith(suffix)), key)


def _check_loader_options(where: str, loader: Mapping[str, Any]) -> None:
    """Refuse an option neither torch's ``DataLoader`` nor MMEngine's ``build_dataloader``
    takes (``batch_szie``), and ``drop_last`` or ``shuffle`` beside a ``batch_sampler``, which
    torch refuses, naming no loader, as the runner builds it.

    Raises:
        UnknownOptionError: naming the loader, the option and the nearest.
        ValueError: naming the loader, the option and the batch sampler.
    """
    from torch.utils.data import DataLoader

    from xmr.registry import UnknownOptionError

    takes = [*inspect.signature(DataLoader).parameters, 'num_batch_per_epoch',
             'disable_subprocess_warning']
    for option in loader:
        if option not in takes:
            raise UnknownOptionError(f"{where}: unknown option '{option}'"
                                     f'{did_you_mean(option, takes)}; a dataloader takes '
                                     f"{', '.join(takes)}")
    for option in ('drop_last', 'shuffle'):
        if loader.get('batch_sampler') and loader.get(option):
            raise ValueError(f'{where}.{option}={loader[option]!r}: its batch_sampler makes the '
                             f'batches, and torch takes no {option} beside one: drop it (the '
                             'batch sampler has its own options)')


#: A loader's counts and the least each may be: torch's own errors (``batch_size=0``,
#: ``num_workers=-1``) name no loader.
_LOADER_COUNTS = {'batch_size': (1, 'a positive integer (per process)'),
                  'num_workers': (0, 'an integer >= 0 (0: load in the main process)')}


#: Options of a loader's worker processes, and the value that turns each off: torch refuses
#: them without workers, naming no loader, where the shipped loaders keep persistent workers
#: and ``num_workers=0`` is how one debugs in the main process.
_WORKER_OPTIONS = {'persistent_workers': False, 'prefetch_factor': None}


def _check_loader_counts(where: str, loader: Mapping[str, Any]) -> None:
    for key, (least, meaning) in _LOADER_COUNTS.items():
        value = loader.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < least):
            raise ValueError(f'{where}.{key}={value!r} must be {meaning}')
    if loader.get('num_workers'):
        return
    for key, off in _WORKER_OPTIONS.items():
        if loader.get(key, off) not in (off, None):
            raise ValueError(f'{where}.{key}={loader[key]!r} needs worker processes, and '
                             f'{where}.num_workers is 0: add {where}.{key}={off}')


def _hooks(cfg: Config) -> dict[str, Any]:
    """Every hook dict of ``cfg`` by its key: ``default_hooks.<name>``, ``custom_hooks.<i>``."""
    return {**{f'default_hooks.{name}': hook
               for name, hook in (cfg.get('default_hooks') or {}).items()},
            **{f'custom_hooks.{i}': hook for i, hook in enumerate(cfg.get('custom_hooks') or [])}}


def check_annotation_files(cfg: Config, splits: Sequence[str]) -> None:
    """Every annotation file that the loaders of ``splits`` read exists, checked as the config
    loads: the runner builds a loader's dataset after the model, whose pretrained weights may
    take minutes, and writes its work dir first. The loaders are those the run builds
    (:func:`_loaders_built`), not every ``*_dataloader`` key: a base config's loaders that no
    phase reads need no files.

    Raises:
        FileNotFoundError: naming the file, its key and the converter that writes it.
    """
    from xmr.datasets.annotation import missing_annotation

    for key, _, path in _annotation_files(cfg, splits):
        if not path.is_file():
            raise missing_annotation(path, f'{key}.ann_file')


def present_train_datasets(cfg: Config) -> dict[str, Mapping[str, Any]]:
    """The annotated dataset dicts that training reads (:func:`_loaders_built`'s ``'train'``
    loaders, wrappers opened), by key, whose annotation files exist: those a run that
    evaluates alone (``tools/test.py``) can read to compare with its galleries
    (:func:`~xmr.datasets.held_out.check_test_held_out`); the training data need not be on
    the machine that tests."""
    return {key: dataset for key, dataset, path in _annotation_files(cfg, ['train'])
            if path.is_file()}


def loader_datasets(cfg: Config, split: str) -> list[Any]:
    """The dataset configs of the ``<split>_dataloader`` (``'val'`` or ``'test'``: a dict or
    a list of them), in the order the split's loop numbers them."""
    return [loader.get('dataset') for loader in _loaders_built(cfg, [split]).values()]


def _annotation_files(cfg: Config, splits: Sequence[str]
                      ) -> Iterator[tuple[str, Mapping[str, Any], Path]]:
    """``(key, dataset dict, annotation path)`` of each annotated dataset the loaders of
    ``splits`` read (:func:`_loaders_built`), the path under the dataset's ``data_root``."""
    for where, loader in _loaders_built(cfg, splits).items():
        for key, dataset in _annotated_datasets(f'{where}.dataset', loader.get('dataset')):
            path = Path(dataset['ann_file'])
            yield key, dataset, (path if path.is_absolute()
                                 else Path(dataset.get('data_root') or '') / path)


def _loaders_built(cfg: Config, splits: Sequence[str]) -> dict[str, Mapping[str, Any]]:
    """The dataloader dicts a run builds for ``splits``, by key. ``'train'``: the
    ``train_dataloader`` (the train loop builds it when given), the loaders the phases name or
    hold, and a hook's own (``CDDSCorrelationHook``'s); ``'val'`` and ``'test'``: the
    ``val_dataloader`` / ``test_dataloader`` (a dict or a list of them)."""
    found: dict[str, Any] = {}
    if 'train' in splits:
        found['train_dataloader'] = cfg.get('train_dataloader')
        for index, phase in enumerate((cfg.get('train_cfg') or {}).get('phases') or []):
            own = phase.get('dataloader') if isinstance(phase, Mapping) else None
            if isinstance(own, str):
                found[own] = cfg.get(own)
            else:
                found[f'train_cfg.phases.{index}.dataloader'] = own
        found.update({f'{where}.dataloader': hook.get('dataloader')
                      for where, hook in _hooks(cfg).items() if isinstance(hook, Mapping)})
    for split in ('val', 'test'):
        if split in splits:
            found.update(_loader_items(f'{split}_dataloader', cfg.get(f'{split}_dataloader')))
    return {key: loader for key, loader in found.items() if isinstance(loader, Mapping)}


def _loader_items(key: str, value: Any) -> dict[str, Any]:
    """A ``*_dataloader`` value by key: itself, or each item of a list of them (as
    ``MultiDatasetValLoop`` takes: ``val_dataloader.1``)."""
    return ({f'{key}.{i}': item for i, item in enumerate(value)}
            if isinstance(value, (list, tuple)) else {key: value})


def _annotated_datasets(where: str, part: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The dataset dicts inside ``part`` (a loader's ``dataset``, wrappers and lists included)
    that build a :class:`~xmr.datasets.base.MediaCaptionDataset`, by their keys."""
    from xmr.datasets.base import MediaCaptionDataset
    from xmr.registry import DATASETS

    if isinstance(part, Mapping) and 'ann_file' in part and \
            _built_type(DATASETS, part, MediaCaptionDataset):
        yield where, part
    children = part.items() if isinstance(part, Mapping) else (
        enumerate(part) if isinstance(part, (list, tuple)) else ())
    for key, child in children:
        yield from _annotated_datasets(f'{where}.{key}', child)


def check_cached_galleries(cfg: Config, split: str) -> None:
    """Refuse a ``<split>_dataloader`` dataset (or one of a list of them) that is a
    ``CachedFeatureDataset`` when the ``<split>`` loop runs and no hook of the config is a
    ``FeatureCacheHook``, which alone prepares such a cache before an evaluation (the training
    loop prepares its phases' own; ``tools/cache_features.py`` builds without a loop): its first
    item stopped the run, at the first validation after a whole training phase, or a test
    after its setup.

    Raises:
        ValueError: naming the loader's key and the hook to add.
    """
    from xmr.engine.feature_cache import CachedFeatureDataset
    from xmr.engine.hooks import FeatureCacheHook
    from xmr.registry import DATASETS, HOOKS

    if cfg.get(f'{split}_cfg') is None or any(
            _built_type(HOOKS, hook, FeatureCacheHook) for hook in _hooks(cfg).values()):
        return
    for where, loader in _dataloaders(cfg).items():
        if where.partition('.')[0] == f'{split}_dataloader' and \
                _built_type(DATASETS, loader.get('dataset'), CachedFeatureDataset):
            raise ValueError(f'{where}.dataset is a CachedFeatureDataset, whose cache only '
                             'FeatureCacheHook prepares before an evaluation, and the config '
                             "has none: add dict(type='FeatureCacheHook') to custom_hooks")


def _built_type(registry: Any, part: Any, wanted: type) -> bool:
    """Whether the config dict ``part`` builds a ``wanted`` (or a subclass) from
    ``registry``; its ``type`` may be the registered name, scoped or not, or the class."""
    built = part.get('type') if isinstance(part, Mapping) else None
    built = registry.get(built) if isinstance(built, str) else built
    return isinstance(built, type) and issubclass(built, wanted)


def _is_count(value: Any, least: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= least


def _check_mmengine_hook_values(where: str, hook: Any, train_cfg: Any) -> None:
    """Refuse a hook type that is no ``mmengine.hooks.Hook`` (the runner reads its ``priority`` as
    it registers it), and what MMEngine's ``LoggerHook`` and ``CheckpointHook`` (xmr's
    subclasses it) refuse as the runner builds them, naming no key (``interval must be greater
    than 0``, ``KeyError: 'rule must be greater, less or None'``), or take and never act on: a
    checkpoint ``interval`` or ``max_keep_ckpts`` of 0 (MMEngine reads any value below 1 as
    'never' and 'no limit'), checkpoints ``by_epoch`` under a loop of iterations (none saved
    periodically).

    Raises:
        ValueError: naming the key, its value and the fix.
    """
    from mmengine.hooks import CheckpointHook, Hook, LoggerHook
    from mmengine.runner import EpochBasedTrainLoop

    from xmr.engine.epoch_counts import is_epochs
    from xmr.registry import HOOKS, LOOPS

    built = hook.get('type') if isinstance(hook, Mapping) else None
    built = HOOKS.get(built) if isinstance(built, str) else built
    if not isinstance(built, type):
        return
    if not issubclass(built, Hook):  # the runner read its priority as it registered it
        raise ValueError(f'{where}: {built.__name__} is no mmengine.hooks.Hook: a hook '
                         'subclasses it, which gives the runner its priority and every point '
                         'it calls (docs/custom_modules.md)')
    if issubclass(built, LoggerHook):
        for key in ('interval', 'interval_exp_name'):
            value = hook.get(key)
            if value is not None and not _is_count(value, 1):
                raise ValueError(f'{where}.{key}={value!r} must be a positive integer '
                                 '(iterations between two logs)')
    if not issubclass(built, CheckpointHook):
        return
    for key, meaning in (('interval', 'no periodic checkpoint (save_last still saves the last)'),
                         ('max_keep_ckpts', 'keep every checkpoint')):
        value = hook.get(key)
        if key == 'interval' and is_epochs(value):
            continue  # _check_epoch_counts
        if value is not None and value != -1 and not _is_count(value, 1):
            raise ValueError(f'{where}.{key}={value!r} must be a positive integer'
                             + (' (iterations), dict(epochs=E)' if key == 'interval' else '')
                             + f', or -1 for {meaning}: MMEngine reads any value below 1 as -1')
    save_begin = hook.get('save_begin')
    if save_begin is not None and not _is_count(save_begin, 0):
        raise ValueError(f'{where}.save_begin={save_begin!r} must be an integer >= 0')
    rule = hook.get('rule')
    for item in rule if isinstance(rule, (list, tuple)) else [rule]:
        if item not in ('greater', 'less', None):
            raise ValueError(f"{where}.rule={rule!r}: a rule is 'greater' (a higher "
                             "save_best metric is better, as for mAR and R@K), 'less' or None "
                             '(inferred from the metric name)')
    loop = train_cfg.get('type') if isinstance(train_cfg, Mapping) else None
    loop = LOOPS.get(loop) if isinstance(loop, str) else loop
    # MMEngine's CheckpointHook counts epochs unless told otherwise.
    if (hook.get('by_epoch', True) and isinstance(loop, type)
            and not issubclass(loop, EpochBasedTrainLoop)):
        raise ValueError(f'{where}.by_epoch=True, but the train loop {loop.__name__} counts '
                         'iterations and ends no epoch: no checkpoint would be saved before the '
                         f'last; set {where}.by_epoch=False (interval then counts iterations)')


def _check_epoch_counts(cfg: Config) -> None:
    """Every count given in epochs (``train_cfg.val_interval``, a hook's ``interval``:
    :mod:`xmr.engine.epoch_counts`) is ``dict(epochs=E)``, under a ``PhasedTrainLoop``, the loop
    that resolves them; another would fail at its first step's modulo, naming no key.

    Raises:
        ValueError: naming the key, its value and the fix.
    """
    from xmr.engine.epoch_counts import check_epochs, is_epochs
    from xmr.engine.loops import PhasedTrainLoop
    from xmr.registry import LOOPS

    train_cfg = cfg.get('train_cfg')
    counts = {f'{where}.interval': hook.get('interval') for where, hook in _hooks(cfg).items()
              if isinstance(hook, Mapping)}
    counts['train_cfg.val_interval'] = (train_cfg or {}).get('val_interval')
    loop = train_cfg.get('type') if isinstance(train_cfg, Mapping) else None
    loop = LOOPS.get(loop) if isinstance(loop, str) else loop
    for where, value in counts.items():
        if not is_epochs(value):
            continue
        check_epochs(where, value)
        if not (isinstance(loop, type) and issubclass(loop, PhasedTrainLoop)):
            raise ValueError(f'{where}={dict(value)!r}: a count in epochs is resolved by '
                             f"PhasedTrainLoop, and train_cfg's loop is "
                             f"{getattr(loop, '__name__', loop)}; give iterations")


def _check_optimizer(optimizer: Any) -> None:
    """Refuse the options of ``optim_wrapper.optimizer`` its type refuses, by building it on a
    parameter of one number (the device options left out: ``fused`` wants the run's device):
    torch's own errors (``Invalid weight_decay value: -1``; ``betas=[0.9]``: ``list index out of
    range``) named no key, as the runner built the optimiser after making the work dir.

    Raises:
        ValueError: naming the key, the value, and the optimiser's reason.
    """
    from xmr.registry import OPTIMIZERS

    if not isinstance(optimizer, Mapping):
        return
    lr = optimizer.get('lr')
    if isinstance(lr, (int, float)) and not isinstance(lr, bool) and not lr >= 0:
        raise ValueError(f'optim_wrapper.optimizer.lr={lr!r} must be a number >= 0 (a phase\'s '
                         'own lr, train_cfg.phases.N.lr, replaces it where the loop is phased)')
    kind = optimizer.get('type')
    built = OPTIMIZERS.get(kind) if isinstance(kind, str) else kind
    if not isinstance(built, type) or '_scope_' in optimizer:
        return
    options = {key: value for key, value in optimizer.items()
               if key not in ('type', 'fused', 'foreach', 'capturable')}
    import torch

    try:
        built([torch.nn.Parameter(torch.zeros(1))], **options)
    except Exception as error:  # the optimiser's own checks raise what they like
        raise ValueError(f'optim_wrapper.optimizer: {built.__name__} refuses its options '
                         f'{options}: {type(error).__name__}: {error}') from error


def _metrics(cfg: Config) -> dict[str, Any]:
    """The metric dicts of ``val_evaluator`` and ``test_evaluator`` by their keys: one, a list
    of them (``val_evaluator.1``), or an ``Evaluator`` dict's ``metrics``
    (``test_evaluator.metrics.0``)."""
    found: dict[str, Any] = {}
    for key in ('val_evaluator', 'test_evaluator'):
        evaluator = cfg.get(key)
        if isinstance(evaluator, Mapping) and 'metrics' in evaluator:
            evaluator, key = evaluator['metrics'], f'{key}.metrics'
        if isinstance(evaluator, (list, tuple)):
            found.update({f'{key}.{index}': metric for index, metric in enumerate(evaluator)})
        else:
            found[key] = evaluator
    return found


def _check_metric_values(where: str, metric: Any) -> None:
    """Build the metric at ``where``, which costs nothing beside a run (the 209 metrics of the
    shipped configs build in 0.04 s), so that what its constructor refuses (an unknown
    ``protocol``, ``recall_ks`` of 0, a language code) is named by its key before the runner
    makes the work dir, where the evaluator built it as the first validation or test began.

    Raises:
        ValueError: ``<key>: <the metric's reason>``.
    """
    from xmr.registry import METRICS

    if not isinstance(metric, Mapping) or '_scope_' in metric:
        return
    try:
        METRICS.build(metric)
    except (ValueError, TypeError, KeyError) as error:
        reason = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise ValueError(f'{where}: {reason}') from error


def _check_option_keys(cfg: Config, cfg_options: Mapping[str, Any]) -> UserError | None:
    """Refuse an option whose key indexes past the end of a list (``train_cfg.phases.3.iters``
    of three phases; MMEngine's error prints the whole list); return the error of one that
    names a key a dict lacks but holds one a typo away (:func:`_typo_of`:
    ``train_dataloder.batch_size``, ``env_cfg.cudnn_benchmrk``), which MMEngine would add as a
    new key that nothing reads. A new key is taken (``cpu_threads``; ``val_dataloader`` beside
    ``train_dataloader``). The caller raises that error once :func:`check_run_values` has
    checked the merged config: a typed part's own refusal names its type and options.

    Raises:
        UserError: naming the option, the list and its indices, or the value that holds no
            keys (``train_dataloader.batch_size.x``; MMEngine's merge fails on it), or two
            options of which one sets a key and the other one inside it (``a=None a.b=2``:
            the merge failed, or dropped ``a.b``, by their order).
    """
    _refuse_nested_options(cfg_options)
    whole = cfg.to_dict()
    replaced = {key.removesuffix('._delete_') for key in cfg_options if key.endswith('._delete_')}
    # Every key walked, so that one past a list's end is refused whatever typo came before.
    typos = [_typo_in_key(whole, key, replaced) for key in cfg_options]
    return next((typo for typo in typos if typo is not None), None)


def _refuse_nested_options(cfg_options: Mapping[str, Any]) -> None:
    """Refuse two options of which one sets a key and the other one inside it."""
    for key in cfg_options:
        inside = next((other for other in cfg_options if other.startswith(f'{key}.')), None)
        if inside is not None:
            raise UserError(f'--cfg-options {key}', f'sets {key} to {cfg_options[key]!r}, and '
                            f'{inside} sets a key inside it', 'give one of the two')


def _typo_in_key(whole: Mapping[str, Any], key: str, replaced: set[str]) -> UserError | None:
    """Walk option ``key`` down the config ``whole``: refuse an index into a list it lacks, or
    a key into a value that holds none (unless an option's ``_delete_`` of it or of a dict
    above it, in ``replaced``, makes it a dict anew); return the error of a missing key a typo
    away from one the dict holds, ``None`` where it is new or found."""
    node: Any = whole
    walked: list[str] = []
    for part in key.split('.'):
        if isinstance(node, (list, tuple)) and not part.isdigit():
            raise UserError(f'--cfg-options {key}',
                            f"{'.'.join(walked)} is a list of {len(node)} items",
                            f'name one by its index, 0 to {len(node) - 1}')
        if not isinstance(node, (Mapping, list, tuple)):
            where = '.'.join(walked)
            if any(where == path or where.startswith(path + '.') for path in replaced):
                return None
            # An option makes no dict (a count in epochs in place of iterations) but by
            # _delete_ and its keys.
            to_dict = f'({where}._delete_=True {key}=...)'
            raise UserError(f'--cfg-options {key}',
                            f'{where} is {node!r}, which holds no key {part!r}',
                            f'make it a dict first {to_dict}' if node is None else
                            f'give {where} a value of its own ({where}=...), or make it a '
                            f'dict {to_dict}')
        if isinstance(node, (list, tuple)):
            if int(part) >= len(node):
                raise UserError(f'--cfg-options {key}',
                                f"{'.'.join(walked)} holds {len(node)} items (indices 0 to "
                                f'{len(node) - 1})',
                                'name one of them, or give the whole list')
            node = node[int(part)]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            # Not of 'type': a misspelt one is an unknown option of the type
            # (check_run_values), and a new key may be one letter from it (dtype=...).
            meant = _typo_of(part, [k for k in node if k != 'type'])
            if meant is None:
                return None
            where = '.'.join(walked) or 'the config'
            return UserError(f'--cfg-options {key}', f"{where} has no key '{part}' (did you "
                             f"mean '{meant}'?), so nothing would read it",
                             'correct the key (tools/print_config.py prints the config)')
        walked.append(part)
    return None


def _refuse_copied_variables(cfg: Config, cfg_options: Mapping[str, Any]) -> None:
    """Refuse an option that sets a variable of the config (``data_root``, ``target_langs``,
    ``data_prefix.media``) whose value the config copied where it uses it as it loaded: the
    copies keep the old value, and the run read the old data or languages (MMEngine's merge
    changes the variable alone). A variable is a top-level key MMEngine's runner does not read,
    holding text, a non-empty list or a non-empty dict that some nested key holds too (a number
    would meet its equal by chance: ``weight_decay`` 0.05 and ``warmup_ratio``).

    Raises:
        UserError: naming the option, the keys holding the copies and the one to set.
    """
    whole = cfg.to_dict()
    for key, value in cfg_options.items():
        variable, _, inner = key.partition('.')
        copies = stale_copies(whole, key, value)
        if copies:
            old = whole[variable]
            shown_old = repr(old) if len(repr(old)) <= 60 else f'{repr(old)[:57]}...'
            raise UserError(f'--cfg-options {key}', f'{variable} is a variable of the config, '
                            f'whose value {shown_old} was copied where the config uses it as '
                            f'it loaded ({first_few(copies, 4)}): changing {key} now changes '
                            'none of them',
                            f"set those keys instead ({copies[0]}{'.' + inner if inner else ''}"
                            f'={value!r} ...)')


#: Top-level keys xmr reads beside those of MMEngine's runner.
XMR_TOP_LEVEL_KEYS = ('cpu_threads', 'custom_imports', 'paper_figures')


def _top_level_keys_read() -> list[str]:
    """The top-level keys MMEngine's runner or xmr reads, sorted."""
    return sorted({*runner_keys(), *XMR_TOP_LEVEL_KEYS})


def _refuse_top_level_typos(cfg: Config, config: Path, cfg_options: Mapping[str, Any],
                            own_keys: set[str], ablations: Sequence[str]) -> None:
    """Refuse a top-level key one edit from one the runner or xmr reads (``optim_wraper``,
    ``randomnes``, ``cpu_thread``): nothing reads it, and the run kept the base's value. A key
    the config names elsewhere (a phase's ``dataloader='text_dataloader'``) or whose value it
    copied where it uses it (``text_cfg``) is read, and any other new key is a variable of the
    config (``zh_val_dataloader``): those are taken.

    Args:
        own_keys: the keys of ``config`` with its bases, before the ``ablations`` rows.

    Raises:
        UserError: naming the key, where it was given (the file, the row or the option) and the
            key meant.
    """
    known = _top_level_keys_read()
    whole = cfg.to_dict()
    for key in cfg:
        # One edit only: a loader variable (zh_val_dataloader) is 90% alike its runner key.
        meant = None if key in known or key.startswith('_') else next(
            (name for name in known if len(key) >= 4 and _one_edit_apart(key, name)), None)
        if meant is None or _used_elsewhere(whole, key):
            continue
        options = [option for option in cfg_options if option.partition('.')[0] == key]
        # An option's typo of a key the config holds is _check_option_keys' to name.
        if not (options and meant in cfg):
            given = f'--cfg-options {options[0]}' if options else (
                str(config) if key in own_keys
                else _row_setting(key, ablations))
            raise UserError(given, f"the top-level key '{key}' is read by nothing (did you "
                            f"mean '{meant}'?): {meant} keeps the value it has without it",
                            'correct the key')


def _row_setting(key: str, ablations: Sequence[str]) -> str:
    """``--ablation <row>`` (with its file, for a shipped row) for the last of ``ablations``
    to set the top-level ``key``."""
    row = next(row for row in reversed(ablations) if key in read_config_file(ablation_path(row)))
    path = str(ablation_path(row))
    return f'--ablation {row}' + ('' if path == str(row) else f' ({path})')


def _refuse_unread_new_values(cfg: Config, held: set[str], cfg_options: Mapping[str, Any]) -> None:
    """Refuse an option that adds a top-level value (no dict) to a config that held no such key
    (``lambda_align=0.1``, the variable of an older config), unless the runner or xmr reads the
    key (``cpu_threads``) or the config names it: the config's copies were made as it loaded, so
    nothing reads the new value. A new dict is taken (a loader a phase may name).

    Raises:
        UserError: naming the option.
    """
    known = _top_level_keys_read()
    whole = cfg.to_dict()
    for key, value in cfg_options.items():
        if ('.' in key or key in held or key in known or isinstance(value, Mapping)
                or _used_elsewhere(whole, key)):
            continue
        raise UserError(f'--cfg-options {key}', f"the config has no top-level key '{key}', so "
                        f'nothing reads the value {value!r} it would add',
                        'set the key where the value is used (tools/print_config.py prints the '
                        'config)')


def _used_elsewhere(whole: Mapping[str, Any], key: str) -> bool:
    """Whether the config names top-level ``key`` in a value (a phase's ``dataloader``) or holds
    a copy of its value under another key (:func:`~xmr.config_variables.variable_copies`)."""
    return bool(variable_copies(whole, key)) or any(
        found == key for path, found in nested_values(whole, '') if '.' in path)


def _refuse_optimizer_lr_option(cfg: Config, cfg_options: Mapping[str, Any]) -> None:
    """Refuse ``--cfg-options optim_wrapper.optimizer.lr=...`` under the phased loop, which sets
    every group's rate from its phase at every iteration and reads the optimiser's never: the
    run finished on the phases' rates while its dumped config recorded the option's.

    Raises:
        UserError: naming the option and the phases' rates to set instead.
    """
    train_cfg = cfg.get('train_cfg') or {}
    if 'optim_wrapper.optimizer.lr' not in cfg_options or \
            train_cfg.get('type') != 'PhasedTrainLoop':
        return
    rates = ', '.join(f"{index}: {phase.get('name')} {phase.get('lr')}"
                      for index, phase in enumerate(train_cfg.get('phases') or []))
    raise UserError('--cfg-options optim_wrapper.optimizer.lr',
                    "PhasedTrainLoop sets every group's learning rate from its phase's lr at "
                    f"every iteration and never reads the optimiser's (the phases': {rates})",
                    'set train_cfg.phases.N.lr=... instead')


def merge_options(cfg: Config, cfg_options: Mapping[str, Any]) -> None:
    """Merge ``cfg_options`` (dotted keys, ``--cfg-options``) into ``cfg``, as MMEngine's
    ``merge_from_dict`` does, and replace a list's item that is no dict
    (``test_dataloader.dataset.languages.1=fr``), where MMEngine fails
    (:func:`xmr.ablations.list_items_replaced`)."""
    nested: dict[str, Any] = {}
    for key, value in cfg_options.items():
        *parents, last = key.split('.')
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    cfg.merge_from_dict(list_items_replaced(nested, cfg.to_dict()))


def _typo_of(word: str, keys: Sequence[str]) -> str | None:
    """The key ``word`` is a typo of: one edit away (a character added, dropped, replaced, or
    two swapped) from a key of 4 characters or more, or 90% alike; ``None`` when none is."""
    for key in keys:
        if min(len(word), len(key)) >= 4 and _one_edit_apart(word, key):
            return key
    close = difflib.get_close_matches(word, keys, n=1, cutoff=0.9)
    return close[0] if close else None


def _one_edit_apart(a: str, b: str) -> bool:
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    start = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    if len(a) != len(b):
        shorter, longer = sorted((a, b), key=len)
        return shorter[start:] == longer[start + 1:]
    swapped = a[start + 2:] == b[start + 2:] and a[start:start + 2] == b[start:start + 2][::-1]
    return a[start + 1:] == b[start + 1:] or swapped
