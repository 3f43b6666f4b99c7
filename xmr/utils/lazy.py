"""Packages that import their parts on first access, so that importing them loads nothing heavy
(``import xmr`` needs no torch; the converters of ``xmr.datasets`` need none either)."""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ['lazy_attribute']


def lazy_attribute(package: str, name: str, homes: Mapping[str, str] | None = None) -> Any:
    """``package``'s attribute ``name``, imported now: from its module named in ``homes``
    (``{'CaptionPairDataset': 'pairs'}``), else the subpackage or module ``package.name``.

    A package's module-level ``__getattr__`` returns this.

    Raises:
        AttributeError: ``package`` has no such attribute, as Python words it.
    """
    if homes and name in homes:
        return getattr(importlib.import_module(f'{package}.{homes[name]}'), name)
    if not name.startswith('_'):
        try:
            return importlib.import_module(f'{package}.{name}')
        except ModuleNotFoundError as error:
            if error.name != f'{package}.{name}':
                raise
    raise AttributeError(f"module '{package}' has no attribute '{name}'")
