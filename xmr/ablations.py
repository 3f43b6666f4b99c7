"""Ablations as overlays: one paper row's switch, applied to any config of its method.

An ablation file, ``configs/<method>/ablations/<row>.py``, holds only what the row changes and
no ``_base_``, e.g. DASD's Table 6 row without ``L_sc``::

    model = dict(disentangler=dict(use_consistency_loss=False))

``tools/train.py CONFIG --ablation dasd/no-sc`` (and ``tools/test.py``,
``tools/cache_features.py``) merges it into CONFIG the way a child config merges into its base
(dict merge; ``_delete_=True`` replaces a dict), after the config and before ``--cfg-options``.
So one file serves the Multi30K, MSCOCO, video and demo configs alike, and rows combine:
``--ablation dasd/no-sc dasd/no-adv`` is Table 6's row without either loss. A list's items
are overlaid by index, ``{'1': dict(...)}``, or all of them with ``'*'``: ``train_cfg =
dict(phases={'*': dict(schedule='bert_cosine')})`` changes every phase. An ablation that
configures a module the config or an earlier ablation removes (sets to ``None``) or does not
have at all (a dict without a ``type`` where the config has nothing), removes a module an
earlier ablation configures, or sets a key an earlier ablation set to another value (or
replaces whole a part where it set one), fails before anything is built, naming both.
"""
from __future__ import annotations

import ast
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mmengine.config import Config

from xmr.config_files import read_config_file
from xmr.config_variables import stale_copies
from xmr.packaged import packaged_root
from xmr.utils.cli import did_you_mean
from xmr.utils.listing import first_few

__all__ = ['ablation_path', 'apply_ablations', 'ablation_suffix', 'list_items_replaced']

_DELETE = '_delete_'
#: An overlay's key for every item of a list: ``train_cfg = dict(phases={'*': dict(...)})``.
EVERY_ITEM = '*'


def ablation_path(name: str | os.PathLike) -> Path:
    """The file of ablation ``name``.

    Args:
        name: ``'<method>/<row>'`` for a shipped ablation (``'dasd/no-sc'`` is
            ``configs/dasd/ablations/no-sc.py`` of the installed package), or the path of a
            ``.py`` file of one's own.

    Raises:
        FileNotFoundError: naming the file looked for (or, for a bare row, the method it
            lacks; for a method alone, ``'dasd/'``, its rows), the nearest shipped ablation and
            all of them.
    """
    name = str(name)
    if name.endswith('.py'):
        path = Path(name)
    else:
        method, _, row = name.partition('/')
        path = packaged_root() / 'configs' / method / 'ablations' / f'{row}.py'
    # A bare row ('no-sc') names no method: it is not looked up under configs/no-sc/.
    if path.is_file() and (name.endswith('.py') or row):
        return path
    shipped = sorted(f'{p.parent.parent.name}/{p.stem}'
                     for p in (packaged_root() / 'configs').glob('*/ablations/*.py'))
    methods = sorted({ablation.partition('/')[0] for ablation in shipped})
    if name.endswith('.py') or row:
        problem = f': no file {path}{did_you_mean(name, shipped)}'
    elif method in methods:  # 'dasd/' or 'dasd': the method, its row left out
        rows = [ablation for ablation in shipped if ablation.startswith(f'{method}/')]
        raise FileNotFoundError(f'ablation {name!r} names no row of method {method!r}; name '
                                f"one as '{method}/<row>' ({', '.join(rows)})")
    elif method and name.endswith('/'):
        problem = (f' names no row, and {method!r} is no method with shipped ablations'
                   f'{did_you_mean(method, methods)}')
    else:
        rows = [ablation for ablation in shipped if ablation.endswith(f'/{name}')]
        problem = ' names no method' + (f" (did you mean '{rows[0]}'?)" if len(rows) == 1 else '')
    raise FileNotFoundError(f'ablation {name!r}{problem}; name a shipped ablation as '
                            f"'<method>/<row>' ({', '.join(shipped)}) or the path of a .py file")


def ablation_suffix(names: Sequence[str | os.PathLike]) -> str:
    """``'_no-sc_no-adv'`` for ``['dasd/no-sc', 'dasd/no-adv']``: what a run's default work
    directory adds to the config's name, so that each row keeps its own."""
    return ''.join(f'_{Path(str(name)).stem}' for name in names)


def apply_ablations(cfg: Config, names: Sequence[str | os.PathLike]) -> Config:
    """Merge the ablations ``names`` into ``cfg``, in order (see the module docstring).

    Args:
        cfg: the loaded config; changed in place and returned.
        names: ablations as :func:`ablation_path` takes them.

    Raises:
        ValueError: an ablation configures a part that the config or an earlier ablation removes
            or does not have, or removes a part an earlier ablation configures; naming both and
            the key.
    """
    configured: dict[tuple[str, ...], str] = {}
    removed = {path: f'the config {cfg.filename}' for path in _removed_paths(cfg.to_dict())}
    removed_by_config = set(removed)
    for name in names:
        path = ablation_path(name)
        # Its custom_imports are the merged config's, which load_run_config imports.
        overlay = read_config_file(path).to_dict()
        who = f'ablation {str(name)!r}'
        where = who if str(name).endswith('.py') else f'{who} ({path})'
        if _has_base(path):
            raise ValueError(f'{where} has a _base_: a row holds only what it changes, merged '
                             'into the config it is run with, which its base would replace '
                             'whole; drop the _base_, and give the config to start from as '
                             'CONFIG')
        if not overlay:
            raise ValueError(f'{where} changes nothing: it defines no key')
        _refuse_copied_variables(cfg.to_dict(), overlay, where)
        overlay = _every_item_indexed(overlay, cfg.to_dict(), who)
        for keys in _merged_paths(overlay):
            # Setting a key that is None is an override; merging beneath it completes a part
            # that is not there.
            for end in range(1, len(keys)):
                if keys[:end] in removed:
                    raise ValueError(
                        f"{who} configures {'.'.join(keys)}, but {removed[keys[:end]]} removes "
                        f"{'.'.join(keys[:end])} (None): the two cannot be combined (to add "
                        f'the part anew, give it whole with {_DELETE}=True)')
            absent = _absent_part(cfg.to_dict(), overlay, keys)
            if absent is not None:
                raise ValueError(
                    f"{who} configures {'.'.join(keys)}, but the config {cfg.filename} has no "
                    f"{'.'.join(absent)}: the row applies to configs that have one (to add the "
                    f'part anew, give it whole with its type)')
            by = removed.get(keys, who)
            if by != who and keys not in removed_by_config:
                raise ValueError(
                    f"{by} sets {'.'.join(keys)} to None, and {who} to "
                    f'{_value_at(overlay, keys)!r}: only the last would take effect, while the '
                    'run is named after both; the two rows cannot be combined')
            _refuse_overridden(configured, keys, _value_at(overlay, keys), who)
            configured.setdefault(keys, (who, _value_at(overlay, keys)))
        for keys in _removed_paths(overlay):
            clash = [k for k in configured
                     if k[:len(keys)] == keys and configured[k][0] != who]
            if clash:
                raise ValueError(
                    f"{who} removes {'.'.join(keys)} (None), but {configured[clash[0]][0]} "
                    f"configures {'.'.join(clash[0])}: the two rows cannot be combined")
            removed[keys] = who
        cfg.merge_from_dict(list_items_replaced(overlay, cfg.to_dict()))
    return cfg


def _has_base(path: Path) -> bool:
    """Whether the config file ``path`` (which MMEngine has read) assigns ``_base_``."""
    return any(isinstance(node, ast.Assign) and any(
        isinstance(target, ast.Name) and target.id == '_base_' for target in node.targets)
        for node in ast.parse(path.read_text(encoding='utf-8')).body)


def _refuse_copied_variables(whole: Mapping[str, Any], overlay: Mapping[str, Any],
                             who: str) -> None:
    """Refuse a row that gives a config variable (``target_langs``, ``data_root``) another
    value: the config copied the old one where it uses it as it loaded, so the run would read
    the old data or languages under the row's name.

    Raises:
        ValueError: naming the row, the variable and the keys holding its copies.
    """
    for key, value in overlay.items():
        copies = stale_copies(whole, key, value)
        if copies:
            raise ValueError(f'{who} sets {key}, a variable of the config whose value was '
                             f'copied where the config uses it as it loaded '
                             f'({first_few(copies, 4)}): the row '
                             'would change none of them; set those keys in the row instead')


def _refuse_overridden(configured: Mapping[tuple[str, ...], tuple[str, Any]],
                       keys: tuple[str, ...], value: Any, who: str) -> None:
    """Refuse a row that sets ``keys`` to another value than an earlier row did, or replaces
    whole a part beneath which an earlier row set a key: only the last row would count, while
    the run is named after both.

    Raises:
        ValueError: naming both rows, the key and the values.
    """
    for earlier, (by, given) in configured.items():
        if by == who or earlier[:len(keys)] != keys or (earlier == keys and given == value):
            continue
        what = (f'to {given!r}, and {who} to {value!r}' if earlier == keys else
                f"and {who} replaces {'.'.join(keys)} whole")
        raise ValueError(f"{by} sets {'.'.join(earlier)} {what}: only the last would take "
                         'effect, while the run is named after both; the two rows cannot be '
                         'combined (write one ablation file that sets the combination)')


def _value_at(tree: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    """``tree[keys[0]][keys[1]]...``."""
    for key in keys:
        tree = tree[key]
    return tree


def _every_item_indexed(overlay: Mapping[str, Any], config: Any, who: str,
                        prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    """``overlay`` with each ``{'*': part}`` over a list of ``config`` given as ``{'0': part,
    '1': part, ...}``, one per item: a row that changes every phase whatever their number.

    Raises:
        ValueError: ``'*'`` over something that is not a list, over an empty list (a row
            that changed nothing, named after it all the same), or beside indices.
    """
    indexed = {}
    for key, value in overlay.items():
        # An item's index written as a number (phases={1: ...}), which MMEngine's merge reads
        # as a string ('1'.isdigit()).
        key = str(key) if isinstance(key, int) and not isinstance(key, bool) else key
        path, here = (*prefix, key), _item(config, key)
        if isinstance(value, Mapping) and EVERY_ITEM in value:
            if not isinstance(here, list):
                raise ValueError(f"{who} sets {'.'.join(path)}.{EVERY_ITEM} (every item), which "
                                 f"needs {'.'.join(path)} to be a list in the config; the "
                                 f'config has {type(here).__name__}')
            if not here:
                raise ValueError(f"{who} sets {'.'.join(path)}.{EVERY_ITEM} (every item), but "
                                 f"{'.'.join(path)} is an empty list in the config: the row "
                                 'would change nothing there')
            if len(value) > 1:
                raise ValueError(f"{who} sets {'.'.join(path)}.{EVERY_ITEM} (every item) beside "
                                 f"{sorted(set(value) - {EVERY_ITEM})}: give one or the other")
            value = {str(index): value[EVERY_ITEM] for index in range(len(here))}
        if isinstance(value, Mapping):
            value = _every_item_indexed(value, here, who, path)
        indexed[key] = value
    return indexed


def list_items_replaced(overlay: Mapping[str, Any], config: Any) -> dict[str, Any]:
    """``overlay`` as MMEngine can merge it into ``config``: each ``{index: value}`` over a list
    (or tuple) of ``config`` where a value or the item it overlays is no dict, given as the whole
    list, those items replaced and the others merged.

    MMEngine merges an index into a list's item only where both are dicts (``phases={'1':
    dict(lr=1e-4)}``) and fails on another (``'str' object has no attribute 'copy'``):
    ``languages={'1': 'fr'}``, ``--cfg-options optim_wrapper.optimizer.betas.1=0.99``. An index
    past the list's end is left as it is, for the caller's error.
    """
    replaced = {}
    for key, value in overlay.items():
        here = _item(config, key)
        if isinstance(value, Mapping):
            value = list_items_replaced(value, here)
            if _replaces_an_item(value, here):
                items = list(here)
                for index, item in value.items():
                    old = items[int(index)]
                    items[int(index)] = (
                        Config._merge_a_into_b(item, old, allow_list_keys=True)
                        if isinstance(item, Mapping) and isinstance(old, Mapping) else item)
                value = type(here)(items)  # a tuple stays one (betas)
        replaced[key] = value
    return replaced


def _replaces_an_item(overlay: Mapping[str, Any], config: Any) -> bool:
    """Whether ``overlay`` indexes the list ``config`` within its length, and one of its values
    or the item it overlays is no dict."""
    if not isinstance(config, (list, tuple)) or not all(
            str(index).isdigit() and int(index) < len(config) for index in overlay):
        return False
    return any(not (isinstance(value, Mapping) and isinstance(config[int(index)], Mapping))
               for index, value in overlay.items())


def _item(config: Any, key: Any) -> Any:
    """``config[key]`` for a dict's key or a list's (tuple's) index given as digits; else
    ``None``."""
    if isinstance(config, (list, tuple)) and str(key).isdigit() and int(key) < len(config):
        return config[int(key)]
    return config.get(key) if isinstance(config, Mapping) else None


def _absent_part(config: Mapping[str, Any], overlay: Mapping[str, Any], keys: tuple[str, ...]
                 ) -> tuple[str, ...] | None:
    """The first dict on ``keys`` that ``config`` lacks and ``overlay`` gives without a
    ``type``: options of a module that is not there, which merging would leave typeless. A new
    top-level name is the overlay's own (a dataset dict its loaders share), not a part."""
    if keys[0] not in config:
        return None
    here: Any = config
    given: Any = overlay
    for end, key in enumerate(keys[:-1], 1):
        given = given[key]
        here = _item(here, key)  # a list's item is overlaid as {index: dict(...)}
        if here is None:
            return None if 'type' in given else keys[:end]
    return None


def _merged_paths(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()
                  ) -> Iterator[tuple[str, ...]]:
    """Key paths an overlay sets by merging into what is there: the leaves of its dicts, down to
    a dict with ``_delete_`` (which replaces what is there whole)."""
    for key, value in tree.items():
        if key == _DELETE:
            continue
        path = (*prefix, key)
        if isinstance(value, Mapping) and not value.get(_DELETE):
            yield from _merged_paths(value, path)
        elif value is not None:
            yield path


def _removed_paths(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()
                   ) -> Iterator[tuple[str, ...]]:
    """Key paths set to ``None`` in ``tree``."""
    for key, value in tree.items():
        path = (*prefix, key)
        if value is None:
            yield path
        elif isinstance(value, Mapping):
            yield from _removed_paths(value, path)
