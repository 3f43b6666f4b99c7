"""xmr: cross-lingual cross-modal retrieval on frozen vision-language models.

``import xmr`` is light (the ``xmr::`` config scheme and the version): torch, open_clip and
transformers load with the first subpackage used. Each registry of :mod:`xmr.registry` imports
every module of xmr that registers at its first look-up, so a config builds with nothing
imported first; ``xmr.models`` and the other subpackages import on first access.
"""
from __future__ import annotations

from types import ModuleType

from xmr import packaged  # noqa: F401  (adds the xmr:: scheme to Config)
from xmr.utils.lazy import lazy_attribute
from xmr.version import __version__

__all__ = ['__version__']


def __getattr__(name: str) -> ModuleType:
    """``xmr.models`` and the other subpackages, imported on first access."""
    return lazy_attribute(__name__, name)
