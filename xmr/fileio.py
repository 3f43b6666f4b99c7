"""Atomic file writes: a reader sees the old file or the complete new one, never a partial one."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

__all__ = ['atomic_torch_save', 'write_atomically']


def write_atomically(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Let ``write`` fill a temporary sibling of ``path``, sync it, rename it over ``path``.

    The temporary file is removed when ``write`` fails, so nothing is left behind and an existing
    ``path`` is untouched.

    Returns:
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f'.{path.name}.{os.getpid()}.tmp')
    try:
        write(temporary)
        with temporary.open('rb') as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    return path


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save(obj, path)`` through :func:`write_atomically`."""
    return write_atomically(path, lambda temporary: torch.save(obj, temporary))
