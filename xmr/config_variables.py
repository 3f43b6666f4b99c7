"""A config's variables: top-level keys that MMEngine's runner does not read and whose values
the config copied, as it loaded, where it uses them (``data_root``, ``target_langs``).

Changing such a variable afterwards (``--cfg-options``, an ``--ablation`` row) changes the
variable alone: its copies keep the old value, and the run reads the old data or languages.
"""
from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ['nested_values', 'runner_keys', 'stale_copies', 'value_at',
           'variable_copies']


def runner_keys() -> set[str]:
    """The top-level keys MMEngine's runner reads (its constructor's parameters)."""
    from mmengine.runner import Runner

    return set(inspect.signature(Runner.__init__).parameters)


def stale_copies(whole: Mapping[str, Any], key: str, value: Any) -> list[str]:
    """The copies that setting dotted ``key`` to ``value`` (merged, as a child config or an
    option merges) would leave holding the old value: those of ``key``'s top-level variable,
    or none where that is a key the runner reads or the setting changes nothing."""
    variable = key.partition('.')[0]
    if variable in runner_keys() or variable not in whole or \
            not _changes(value_at(whole, key), value):
        return []
    return variable_copies(whole, variable)


def _changes(old: Any, new: Any) -> bool:
    """Whether merging ``new`` over ``old`` gives another value (a dict merges key by key;
    one with ``_delete_`` replaces the old one, with its other keys)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        if new.get('_delete_'):
            return old != {name: part for name, part in new.items() if name != '_delete_'}
        return any(name not in old or _changes(old[name], part) for name, part in new.items())
    return old != new


def value_at(node: Any, key: str) -> Any:
    """The value at dotted ``key`` inside ``node`` (lists' items by index), ``None`` where
    there is none."""
    for part in key.split('.'):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, (list, tuple)) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def variable_copies(whole: Mapping[str, Any], key: str) -> list[str]:
    """The keys outside top-level ``key`` holding a copy of its value: text, a non-empty list or
    a non-empty dict (a number, or an empty list, meets its equals by chance).

    A copy is a nested key, or a top-level key the runner reads (``test_evaluator =
    target_evaluator``: the run evaluates with that copy); another top-level variable equal to
    it is an alias, whose own copies are nested keys.
    """
    value = whole[key]
    if not (isinstance(value, str) or value and isinstance(value, (list, tuple, Mapping))):
        return []
    read = runner_keys()
    return [path for path, found in nested_values(whole, '')
            if ('.' in path and not path.startswith(key + '.') or path in read)
            and path != key and found == value]


def nested_values(node: Any, path: str = '') -> Iterator[tuple[str, Any]]:
    """``(dotted path, value)`` of every value inside ``node``, lists' items by index."""
    items = (node.items() if isinstance(node, Mapping) else enumerate(node)
             if isinstance(node, (list, tuple)) else ())
    for name, value in items:
        inner = f'{path}.{name}' if path else str(name)
        yield inner, value
        yield from nested_values(value, inner)
