"""Registries of xmr.

Every MMEngine root registry has a child here with scope ``xmr``, so that a config with
``default_scope = 'xmr'`` finds xmr's classes first and MMEngine's (optimisers, hooks, loops)
through the parent. Three project registries hold the parts a method is made of:
``ADAPTERS`` (trainable modules placed in a frozen text tower), ``DISENTANGLERS`` (modules that
turn target embeddings into a condition and losses) and ``TOKENIZERS``. Each imports every
module of xmr (:data:`LOCATIONS`) at its first look-up, so nothing need be imported to build.

A user registers a new type from their own module and loads it with ``custom_imports``::

    from xmr.registry import ADAPTERS
    from xmr.models.adapters import BaseAdapter

    @ADAPTERS.register_module()
    class MyAdapter(BaseAdapter):
        ...
"""
from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from mmengine.registry import DATA_SAMPLERS as MMENGINE_DATA_SAMPLERS
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import EVALUATOR as MMENGINE_EVALUATOR
from mmengine.registry import FUNCTIONS as MMENGINE_FUNCTIONS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import INFERENCERS as MMENGINE_INFERENCERS
from mmengine.registry import LOG_PROCESSORS as MMENGINE_LOG_PROCESSORS
from mmengine.registry import LOOPS as MMENGINE_LOOPS
from mmengine.registry import METRICS as MMENGINE_METRICS
from mmengine.registry import MODEL_WRAPPERS as MMENGINE_MODEL_WRAPPERS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import OPTIMIZERS as MMENGINE_OPTIMIZERS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import RUNNER_CONSTRUCTORS as MMENGINE_RUNNER_CONSTRUCTORS
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import STRATEGIES as MMENGINE_STRATEGIES
from mmengine.registry import TASK_UTILS as MMENGINE_TASK_UTILS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import VISBACKENDS as MMENGINE_VISBACKENDS
from mmengine.registry import VISUALIZERS as MMENGINE_VISUALIZERS
from mmengine.registry import WEIGHT_INITIALIZERS as MMENGINE_WEIGHT_INITIALIZERS
from mmengine.registry import Registry

from xmr.utils.cli import UserKeyError, did_you_mean

__all__ = [
    'RUNNERS', 'RUNNER_CONSTRUCTORS', 'LOOPS', 'HOOKS', 'STRATEGIES', 'DATASETS',
    'DATA_SAMPLERS', 'TRANSFORMS', 'MODELS', 'MODEL_WRAPPERS', 'WEIGHT_INITIALIZERS',
    'OPTIMIZERS', 'OPTIM_WRAPPERS', 'OPTIM_WRAPPER_CONSTRUCTORS', 'PARAM_SCHEDULERS',
    'METRICS', 'EVALUATOR', 'TASK_UTILS', 'VISUALIZERS', 'VISBACKENDS', 'LOG_PROCESSORS',
    'INFERENCERS', 'FUNCTIONS', 'ADAPTERS', 'DISENTANGLERS', 'TOKENIZERS', 'XMRRegistry',
    'UnknownOptionError', 'check_part_options', 'with_defaults',
]


class UnknownOptionError(TypeError):
    """A config gives a type an option its constructor does not take."""


class XMRRegistry(Registry):
    """A registry that names what is wrong with a type or option, and registers after xmr.

    MMEngine's own messages only say that a type is missing, that a name is taken or that a
    constructor got an unexpected keyword; a typo such as ``StaticAdaptor`` or ``hiden``
    deserves the names it was probably meant to be, and a name taken the two modules and the
    two ways out.
    """

    def get(self, key: str) -> Any:
        found = super().get(key)
        if found is None and isinstance(key, str):
            raise UserKeyError(self._unknown_type_message(key))
        return found

    def build(self, cfg: dict, *args: Any, **kwargs: Any) -> Any:
        """Build ``cfg``, first refusing an option its type's constructor does not take."""
        self.check_options(cfg)
        return super().build(cfg, *args, **kwargs)

    def check_options(self, cfg: Any, where: str | None = None,
                      filled: Collection[str] = (), whole: bool = False) -> None:
        """Refuse an option of ``cfg`` its type's constructor does not take (without ``**``,
        or a ``**`` whose keys go on to the callables of its ``forwards_options_to``; the
        names of its ``builder_options`` are taken too), one its builder gives (``filled``: the
        config's would replace what the builder computes), a value of another kind than the
        option's default (:func:`_kind_wanted`), and with ``whole`` an argument without a
        default that ``cfg`` leaves out.

        Args:
            cfg: a config dict with a ``type``; anything else is left alone.
            where: ``cfg``'s key path in the whole config (``model.language_branch.adapters``),
                which prefixes the message with the option's full key; ``None`` for a part
                whose kind already says where it is (``model``, a hook).
            filled: arguments of the type that its builder fills in, which the config may not
                give (an option dict's; a part's ``given_by_builder``, an adapter's
                ``placement``: :func:`check_part_options`). A type built alone takes them.
            whole: ``cfg`` is all its type is built from (a hook, a metric, a dataset: no
                builder adds an argument), so it must give each argument without a default;
                the build refused one left out only after the runner had made its work dir.

        Raises:
            UnknownOptionError: naming the type, the option, the nearest option and the ones the
                type takes.
            ValueError: naming the type, the option, its value and its default; or, with
                ``whole``, the option it must give.
        """
        if not isinstance(cfg, Mapping) or '_scope_' in cfg:
            return
        built = cfg.get('type')
        built = self.get(built) if isinstance(built, str) else built
        if not callable(built):
            return
        try:
            signatures = [inspect.signature(target).parameters
                          for target in (built, *getattr(built, 'forwards_options_to', ()))]
        except (TypeError, ValueError):  # a builtin without a signature: its call will tell
            return
        takes: dict[str, inspect.Parameter] = {}
        for parameters in signatures:
            for name, p in parameters.items():
                if p.kind not in (inspect.Parameter.VAR_POSITIONAL,
                                  inspect.Parameter.VAR_KEYWORD,
                                  inspect.Parameter.POSITIONAL_ONLY) and name != 'self':
                    takes.setdefault(name, p)
        for name in getattr(built, 'builder_options', ()):
            takes.setdefault(name, inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY))
        for name in filled:
            takes.pop(name, None)
        open_ended = len(signatures) == 1 and any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in signatures[0].values())
        for option, value in cfg.items():
            kind = (f'{where}.{option}: ' if where else '') + \
                f"{self.name} {getattr(built, '__name__', built)}"
            if option in filled:
                raise UnknownOptionError(f"{kind}: option '{option}' is given by what builds "
                                         "the part, and the config's would replace it: leave "
                                         f"it out; it takes {', '.join(takes)}")
            if option == 'type' or (option not in takes and open_ended):
                continue
            if option == '_delete_':
                raise UnknownOptionError(f'{kind}: _delete_ reached it: MMEngine applies it '
                                         "where a dict merges into its base's, and leaves it "
                                         "in a list's items; drop it there")
            if option not in takes:
                raise UnknownOptionError(f"{kind}: unknown option '{option}'"
                                         f"{did_you_mean(option, [*takes, 'type'])}; it takes "
                                         f"{', '.join(takes)}")
            wanted = _kind_wanted(value, takes[option])
            if wanted is not None:
                default = takes[option].default
                raise ValueError(f'{kind}: option {option}={value!r} must be {wanted} ' + (
                    '(it has no default)' if default is inspect.Parameter.empty
                    else f'(its default is {default!r})'))
        if whole:
            self._refuse_missing(cfg, built, signatures[0], takes, where)

    def _refuse_missing(self, cfg: Mapping[str, Any], built: Any,
                        parameters: Mapping[str, inspect.Parameter],
                        takes: Mapping[str, inspect.Parameter], where: str | None) -> None:
        """Refuse the first of ``built``'s own ``parameters`` without a default (of those a
        config gives, ``takes``) that ``cfg`` leaves out."""
        missing = next((name for name, p in parameters.items() if name in takes
                        and p.default is inspect.Parameter.empty and name not in cfg), None)
        if missing is not None:
            kind = (f'{where}: ' if where else '') + \
                f"{self.name} {getattr(built, '__name__', built)}"
            raise ValueError(f"{kind}: option '{missing}' has no default: give it; it takes "
                             f"{', '.join(takes)}")

    def _register_module(self, module: type, module_name: str | list[str] | None = None,
                         force: bool = False) -> None:
        """Register ``module``; one from outside xmr after xmr's own types.

        A user's module may register before the first look-up (a driver script, a notebook);
        xmr's modules are imported first, so that ``force=True`` replaces xmr's type whatever
        the order, and a name already taken is refused at the user's registration. A name
        MMEngine's parent registry holds (``AdamW``, ``LoggerHook``) is taken too for a user's
        module: registered here, it would shadow MMEngine's type in every config of scope
        ``xmr``. xmr's own modules replace MMEngine's types this way on purpose
        (``CheckpointHook``).
        """
        users = not module.__module__.startswith('xmr.')
        if users:
            self.import_from_location()
        names = [module.__name__] if module_name is None else (
            [module_name] if isinstance(module_name, str) else module_name)
        holders = {name: self for name in names if name in self._module_dict}
        if users:
            holders = {**self._holders(names), **holders}
        if holders and not force:
            taken, holder = next(iter(holders.items()))
            owner = holder.module_dict[taken].__module__
            where = f"the xmr '{self.name}'" if holder is self else \
                f"MMEngine's '{holder.name}'"
            raise UserKeyError(
                f"'{taken}' is already registered in {where} registry, by "
                f'{owner}, so {module.__module__} cannot register its {module.__name__} under '
                f"that name: give it another (register_module(name='My{taken}')) or, to "
                f"replace {owner}'s, register_module(force=True)")
        super()._register_module(module, module_name, force)

    def _holders(self, names: list[str]) -> dict[str, Registry]:
        """``{name: ancestor registry}`` for each of ``names`` an ancestor holds (the nearest)."""
        holders: dict[str, Registry] = {}
        registry = self.parent
        while registry is not None:
            registry.import_from_location()
            holders.update({name: registry for name in names
                            if name in registry.module_dict and name not in holders})
            registry = registry.parent
        return holders

    def __contains__(self, key: Any) -> bool:
        # A plain name is looked up in the module dicts: a miss through ``get`` tried to import
        # a module of that name and wrote the suggestions of the error, 0.2 ms a registry, and
        # a config's check asks every registry for every part's type.
        if isinstance(key, str) and '.' not in key:
            return key in self.known_names()
        try:
            return self.get(key) is not None
        except KeyError:
            return False

    def known_names(self) -> list[str]:
        """Names this registry resolves: its own, then its ancestors'."""
        self.import_from_location()
        names: list[str] = []
        registry: Registry | None = self
        while registry is not None:
            names.extend(registry.module_dict)
            registry = registry.parent
        return sorted(set(names))

    def _unknown_type_message(self, key: str) -> str:
        name = key.split('.')[-1]
        registries = {constant: registry for constant, registry in globals().items()
                      if isinstance(registry, XMRRegistry)}
        elsewhere = next((registry for registry in registries.values()
                          if registry is not self and name in registry.module_dict), None)
        if elsewhere is not None:
            module = elsewhere.module_dict[name].__module__
            own = next(constant for constant, registry in registries.items() if registry is self)
            fix = (f"use it where xmr builds '{elsewhere.name}' types"
                   if module.startswith('xmr.')
                   else f'register it with xmr.registry.{own} to build it here')
            return (f"'{key}' is not a registered type in the xmr '{self.name}' registry: "
                    f"{module} registered it in the xmr '{elsewhere.name}' registry; {fix}.")
        names = self.known_names()
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
        lowered = [n for n in names if name.lower() in n.lower() and n not in close]
        suggestions = close + lowered[: max(0, 5 - len(close))]
        hint = (f' Closest registered names: {", ".join(suggestions)}.'
                if suggestions else f' Registered names: {", ".join(names[:30])}.')
        return (f"'{key}' is not a registered type in the xmr '{self.name}' registry.{hint} "
                'A type from your own module needs custom_imports in the config.')


def check_part_options(registry: XMRRegistry, cfg: Any, key: str) -> None:
    """Check ``cfg``, a ``registry`` config at ``key``, as :meth:`XMRRegistry.check_options`
    does, then every registered part inside it at any depth (:func:`_parts_inside`), each
    against the registry that builds its type (:func:`_registry_of`) and named by its key path;
    a part may not give what its parent passes it (its type's ``given_by_builder``: an adapter's
    ``placement``, a disentangler's ``tower``), which would replace what the parent computes.

    Then ``cfg``'s type and each part's type that has a classmethod ``check_config(cfg)``
    refuses what its build would from the config alone (a disentangler its branch's adapters
    cannot take, :meth:`~xmr.models.retrievers.CrossLingualRetriever.check_config`).
    And the options of each that are dicts without a ``type`` which its class passes on to a
    callable (``option_dicts``: the SDM's ``generator``, ``torch.compile``'s ``compile``) are
    checked against that callable's arguments (:func:`_check_option_dicts`).

    A part builds only when its parent does (an adapter inside the branch inside the model),
    after MMEngine's runner has made its work dir and log; its misspelt option is refused here,
    as the config loads.

    Raises:
        UnknownOptionError: naming the key, the type, the option, the nearest option and the
            ones the type takes.
        ValueError: naming the key, the type, the option, its value and its default; or what a
            type's ``check_config`` refuses.
    """
    registry.check_options(cfg)
    typed = [(key, cfg, registry)]
    for path, part in _parts_inside(cfg, key):
        owner = _registry_of(part['type'])
        if owner is not None:
            owner.check_options(part, where=path, filled=getattr(
                _built_class(owner, part), 'given_by_builder', ()))
        else:
            _refuse_misspelt_type(part['type'], path)
        typed.append((path, part, owner))
    # Once every option is known good, so that a check reads only options its type takes.
    for path, part, owner in typed:
        built = _built_class(owner, part)
        check = getattr(built, 'check_config', None)
        if check is not None:
            check(part)
        _check_option_dicts(owner, built, part, path)


def _check_option_dicts(registry: XMRRegistry, built: Any, cfg: Mapping[str, Any],
                        key: str) -> None:
    """Check each option of ``cfg`` that is a dict without a ``type`` which ``built`` passes on
    to a callable, as its class declares in ``option_dicts`` (``{option: (callable, the
    arguments the class fills in)}``, the SDM's ``generator``), as a part of that callable's
    type is checked (:meth:`XMRRegistry.check_options`), named by its key."""
    for option, (target, filled) in getattr(built, 'option_dicts', {}).items():
        value = cfg.get(option)
        if isinstance(value, Mapping) and 'type' not in value:
            registry.check_options({'type': target, **value}, where=f'{key}.{option}',
                                   filled=filled)


def with_defaults(kind: Any, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg``'s options over the defaults of ``kind``'s constructor: what a build would pass,
    for a ``check_config`` that reads options the config may leave out."""
    defaults = {name: parameter.default
                for name, parameter in inspect.signature(kind).parameters.items()
                if parameter.default is not inspect.Parameter.empty}
    return {**defaults, **cfg}


def _built_class(registry: XMRRegistry | None, cfg: Any) -> Any:
    """What ``registry`` builds ``cfg`` with (``None`` where it is no config it builds)."""
    if registry is None or not isinstance(cfg, Mapping) or '_scope_' in cfg:
        return None
    built = cfg.get('type')
    return registry.get(built) if isinstance(built, str) else built


def _parts_inside(node: Any, key: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(key path, dict)`` of every dict with a ``type`` inside ``node`` (``node`` left out),
    through dicts and lists: ``model.losses.cl``, ``model.language_branch.adapters.0``."""
    if isinstance(node, Mapping):
        items: Any = node.items()
    elif isinstance(node, (list, tuple)):
        items = enumerate(node)
    else:
        return
    for name, value in items:
        path = f'{key}.{name}'
        if isinstance(value, Mapping) and 'type' in value:
            yield path, value
        yield from _parts_inside(value, path)


def _refuse_misspelt_type(kind: Any, key: str) -> None:
    """Refuse the ``type`` of the part at ``key`` that no registry of xmr holds where one holds
    a name a slip from it, whatever the case (``StaticAdaptr``, ``Lora``): its parent refused
    it only as it built, after the runner had made its work dir. A name far from every
    registered one is left to the parent's build (its own means may build it).

    Raises:
        UserKeyError: ``<key>.type: '<kind>' is not a registered type ...``, with the names meant.
    """
    registries = [registry for registry in globals().values()
                  if isinstance(registry, XMRRegistry)]
    if not isinstance(kind, str) or '.' in kind or any(kind in r for r in registries):
        return
    holders = {name.lower(): (name, registry) for registry in registries
               for name in registry.known_names()}
    close = difflib.get_close_matches(kind.lower(), holders, n=1, cutoff=0.85)
    if close:
        registry = holders[close[0]][1]
        raise UserKeyError(f'{key}.type: {registry._unknown_type_message(kind)}')


def _registry_of(kind: Any) -> XMRRegistry | None:
    """The registry of xmr that builds ``kind`` (a registered name or class): ``None`` where
    none does, or where two resolve it to different classes (which one its parent builds with
    is then unknown, and the parent's build checks it)."""
    name = kind if isinstance(kind, str) else getattr(kind, '__name__', None)
    if not isinstance(name, str):
        return None
    found = {registry: registry.get(name) for registry in globals().values()
             if isinstance(registry, XMRRegistry) and name in registry}
    found = {registry: built for registry, built in found.items()
             if isinstance(kind, str) or built is kind}
    return next(iter(found)) if len({id(built) for built in found.values()}) == 1 else None


def _kind_wanted(value: Any, option: inspect.Parameter) -> str | None:
    """What ``value`` must be, where its kind cannot be that of the option's default: a
    string where the default is a number (``lr='fast'``, found at the first step) or a bool
    (``shuffle='False'``, which is true), a number or a string where it is a list or tuple,
    empty or not (``betas=0.9``, found in torch's optimiser; ``tuned_weights='ln_*'``, read as
    the patterns ``l``, ``n``, ``_``, ``*``); ``None`` where it may be, or where the option's
    annotation takes that kind outside any sequence (``resume: str | bool = False``,
    ``str | Sequence[str]``; not ``Sequence[str]``). A string where the annotation takes a
    sequence and no string (``languages: Sequence[str] | None = None``) is refused whatever
    the default, so is a string where it takes numbers alone (``embed_dim: int``, no default)
    or a config dict and no string (``consistency_loss: dict | None = None``, found as MMEngine
    built it), and a list or tuple where it takes a number or a bool alone (``temperature:
    float = 0.01`` given ``[0.01]``, compared with 0 as the part was built)."""
    default = option.default
    annotation = '' if option.annotation is inspect.Parameter.empty else str(option.annotation)
    taken = _kinds_outside_sequences(annotation)
    if isinstance(value, str) and 'str' in taken:
        return None
    if isinstance(value, str) and _SEQUENCE_OF.search(annotation):
        return ('a number or a list or tuple of them' if taken & {'int', 'float'}
                else f'a list or tuple ([{value!r}] for one)')
    if isinstance(value, str) and taken & {'int', 'float'} and not _TAKES_A_STRING.search(
            annotation):
        return 'a number'
    if isinstance(value, str) and _DICT.search(annotation) and not _TAKES_A_STRING.search(
            annotation):
        return "a dict (dict(type='...', ...))"
    if (isinstance(value, (list, tuple)) and isinstance(default, (int, float))
            and annotation and not _TAKES_A_CONTAINER.search(annotation)):
        return 'True or False' if isinstance(default, bool) else 'a number'
    if isinstance(default, bool):
        return 'True or False' if isinstance(value, str) else None
    if isinstance(default, (int, float)):
        return 'a number' if isinstance(value, str) else None
    if isinstance(default, (list, tuple)) and isinstance(value, (int, float, str)) and not (
            isinstance(value, (int, float)) and taken & {'int', 'float'}):
        return f'a list or tuple ([{value!r}] for one)' if isinstance(value, str) else \
            'a list or tuple'
    return None


def _kinds_outside_sequences(annotation: Any) -> set[str]:
    """The scalar kinds (``str``, ``int``, ``float``) an annotation names outside the brackets
    of a sequence: ``{'str'}`` for ``str | Sequence[str]``, none for ``Sequence[str]``."""
    text, previous = str(annotation), None
    while text != previous:  # innermost first: Sequence[tuple[str, int]]
        previous, text = text, _SEQUENCE_OF.sub('', text)
    return set(re.findall(r'\b(str|int|float)\b', text))


_SEQUENCES = 'Sequence|Iterable|Collection|list|List|tuple|Tuple|set|Set|frozenset|FrozenSet'
_DICTS = 'dict|Dict|Mapping|ConfigDict|ConfigType|OptConfigType'
_SEQUENCE_OF = re.compile(rf'\b(?:{_SEQUENCES})\[[^][]*\]')
# An annotation that takes a config dict; one that may take a string beside it (a path, a
# registered name, a choice); one that takes a sequence, a mapping or anything.
_DICT = re.compile(rf'\b(?:{_DICTS})\b')
_TAKES_A_STRING = re.compile(r'\b(?:str|Any|object|Literal|Path|PathLike|Callable|type)\b')
_TAKES_A_CONTAINER = re.compile(rf'\b(?:{_SEQUENCES}|{_DICTS}|Any|object|Tensor|ndarray)\b')


#: The packages whose modules register into xmr's registries, and the modules of
#: ``xmr.datasets`` that register (that package imports nothing itself, so that its converters
#: start without torch). Every registry imports them all at its first look-up: a type registered
#: into one registry by another package's module (the feature cache's dataset in
#: ``xmr.engine``) is found all the same.
LOCATIONS = ['xmr.datasets.collate', 'xmr.datasets.concat',
             'xmr.datasets.language_batch_sampler', 'xmr.datasets.pairs', 'xmr.datasets.retrieval',
             'xmr.datasets.synthetic', 'xmr.datasets.transforms', 'xmr.engine', 'xmr.evaluation',
             'xmr.models', 'xmr.apis']


def _child(name: str, parent: Registry) -> XMRRegistry:
    return XMRRegistry(name, parent=parent, scope='xmr', locations=LOCATIONS)


RUNNERS = _child('runner', MMENGINE_RUNNERS)
RUNNER_CONSTRUCTORS = _child('runner constructor', MMENGINE_RUNNER_CONSTRUCTORS)
LOOPS = _child('loop', MMENGINE_LOOPS)
HOOKS = _child('hook', MMENGINE_HOOKS)
STRATEGIES = _child('strategy', MMENGINE_STRATEGIES)
DATASETS = _child('dataset', MMENGINE_DATASETS)
DATA_SAMPLERS = _child('data sampler', MMENGINE_DATA_SAMPLERS)
TRANSFORMS = _child('transform', MMENGINE_TRANSFORMS)
MODELS = _child('model', MMENGINE_MODELS)
MODEL_WRAPPERS = _child('model_wrapper', MMENGINE_MODEL_WRAPPERS)
WEIGHT_INITIALIZERS = _child('weight initializer', MMENGINE_WEIGHT_INITIALIZERS)
OPTIMIZERS = _child('optimizer', MMENGINE_OPTIMIZERS)
OPTIM_WRAPPERS = _child('optim_wrapper', MMENGINE_OPTIM_WRAPPERS)
OPTIM_WRAPPER_CONSTRUCTORS = _child(
    'optimizer wrapper constructor', MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS)
PARAM_SCHEDULERS = _child('parameter scheduler', MMENGINE_PARAM_SCHEDULERS)
METRICS = _child('metric', MMENGINE_METRICS)
EVALUATOR = _child('evaluator', MMENGINE_EVALUATOR)
TASK_UTILS = _child('task util', MMENGINE_TASK_UTILS)
VISUALIZERS = _child('visualizer', MMENGINE_VISUALIZERS)
VISBACKENDS = _child('vis_backend', MMENGINE_VISBACKENDS)
LOG_PROCESSORS = _child('log_processor', MMENGINE_LOG_PROCESSORS)
INFERENCERS = _child('inferencer', MMENGINE_INFERENCERS)
FUNCTIONS = _child('function', MMENGINE_FUNCTIONS)

# Project registries stand alone: their types are only ever built by xmr's own modules.
ADAPTERS = XMRRegistry('adapter', scope='xmr', locations=LOCATIONS)
DISENTANGLERS = XMRRegistry('disentangler', scope='xmr', locations=LOCATIONS)
TOKENIZERS = XMRRegistry('tokenizer', scope='xmr', locations=LOCATIONS)
