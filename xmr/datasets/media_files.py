"""Which media files of an annotation exist, found with one listing per folder (no decoding, no
torch: the data tools use it before anything heavy is imported)."""
from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

__all__ = ['missing_media']


def missing_media(media_root: str | os.PathLike, relative_paths: Iterable[str]) -> list[Path]:
    """The files of ``relative_paths`` (``folder/name``) absent under ``media_root``, in order.

    Each folder is listed once: checking 300k files costs one ``scandir`` per folder rather
    than one ``stat`` per file.
    """
    media_root = Path(media_root)
    by_folder: dict[str, list[str]] = defaultdict(list)
    for relative in relative_paths:
        folder, _, name = relative.rpartition('/')
        by_folder[folder].append(name)
    missing: list[Path] = []
    for folder, names in by_folder.items():
        directory = media_root / folder if folder else media_root
        try:
            present = {entry.name for entry in os.scandir(directory)}
        except (FileNotFoundError, NotADirectoryError):
            present = set()
        missing.extend(directory / name for name in names if name not in present)
    return missing
