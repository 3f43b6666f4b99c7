"""Ablations as overlays: one paper row's switch, applied to any config of its method.

An ablation file, ``configs/<method>/ablations/<row>.py``, holds only what the row changes and
no ``_base_``, e.g. DASD's Table 6 row without ``L_sc``::

    model = dict(disentangler=dict(use_consistency_loss=False))

``tools/train.py CONFIG --ablation dasd/no-sc`` (and ``tools/test.py``,
``tools/cache_features.py``) merges it into CONFIG the way a child config merges into its base
(dict merge; ``_delete_=True`` replaces a dict), after the config and before ``--cfg-options``.
So one file serves the Multi30K, MSCOCO, video and demo configs alike, and rows combine:
``--ablation dasd/no-sc dasd/no-adv`` is Table 6's row without either loss. An ablation that
configures a module the config or an earlier ablation removes (sets to ``None``) or does not
have at all (a dict without a ``type`` where the config has nothing), or removes a module an
earlier ablation configures, fails before anything is built, naming both.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mmengine.config import Config

from xmr.packaged import packaged_root

__all__ = ['ablation_path', 'apply_ablations', 'ablation_suffix']

_DELETE = '_delete_'


def ablation_path(name: str | os.PathLike) -> Path:
    """The file of ablation ``name``.

    Args:
        name: ``'<method>/<row>'`` for a shipped ablation (``'dasd/no-sc'`` is
            ``configs/dasd/ablations/no-sc.py`` of the installed package), or the path of a
            ``.py`` file of one's own.

    Raises:
        FileNotFoundError: naming the file looked for and the shipped ablations of the method.
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
    raise FileNotFoundError(f'ablation {name!r}: no file {path}; name a shipped ablation as '
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
    for name in names:
        path = ablation_path(name)
        overlay = Config.fromfile(str(path)).to_dict()
        if not overlay:
            raise ValueError(f'ablation {name!r} ({path}) changes nothing: it defines no key')
        who = f'ablation {str(name)!r}'
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
            configured.setdefault(keys, who)
        for keys in _removed_paths(overlay):
            clash = [k for k in configured
                     if len(k) > len(keys) and k[:len(keys)] == keys and configured[k] != who]
            if clash:
                raise ValueError(
                    f"{who} removes {'.'.join(keys)} (None), but {configured[clash[0]]} "
                    f"configures {'.'.join(clash[0])}: the two rows cannot be combined")
            removed[keys] = who
        cfg.merge_from_dict(overlay)
    return cfg


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
        if isinstance(here, list) and str(key).isdigit() and int(key) < len(here):
            here = here[int(key)]  # a list's item, overlaid as {index: dict(...)}
        elif isinstance(here, Mapping) and key in here:
            here = here[key]
        else:
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
