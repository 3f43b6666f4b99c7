"""Which media files of an annotation exist, found with one listing per folder (no decoding, no
torch: the data tools use it before anything heavy is imported)."""
from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterable
from pathlib import Path

__all__ = ['EMPTY_FILE', 'FOLDER', 'LFS_POINTER', 'LFS_POINTER_HEAD', 'LFS_POINTER_LIMIT',
           'is_lfs_pointer', 'missing_media', 'other_spelling_hint', 'shown_path']

#: Why an empty file (a failed copy or download) cannot be read, image or video.
EMPTY_FILE = 'the file is empty (0 bytes)'
#: What a media path that names a folder is said to be.
FOLDER = 'is a folder, not a file'
#: Why a Git LFS pointer cannot be read as the media it stands for.
LFS_POINTER = ("a Git LFS pointer, not the file it stands for (a clone made without Git LFS, "
               "the files never fetched): fetch them, e.g. 'git lfs pull' in their repository")
# The first line of every Git LFS pointer (git-lfs's spec, v1).
_LFS_POINTER_START = b'version https://git-lfs.github.com/spec/'
#: The size every Git LFS pointer stays under: Git LFS takes no larger file for one.
LFS_POINTER_LIMIT = 1024
#: Bytes of a file's start that :func:`is_lfs_pointer` reads.
LFS_POINTER_HEAD = len(_LFS_POINTER_START)


def is_lfs_pointer(head: bytes, size: int) -> bool:
    """Whether a file of ``size`` bytes whose first bytes are ``head`` (at least
    :data:`LFS_POINTER_HEAD` of them) is a Git LFS pointer: a few lines of text standing for a
    file a clone did not fetch (a dataset repository cloned without Git LFS), under the
    file's own name."""
    return size < LFS_POINTER_LIMIT and head.startswith(_LFS_POINTER_START)


def missing_media(media_root: str | os.PathLike, relative_paths: Iterable[str]) -> list[Path]:
    """The files of ``relative_paths`` (``folder/name``) absent under ``media_root``, in order.

    Each folder is listed once: checking 300k files costs one ``scandir`` per folder rather
    than one ``stat`` per file. An entry counts when it is a file, or a link to one: a broken
    link or a folder under the file's name cannot be read either.
    """
    media_root = Path(media_root)
    present: dict[str, set[str]] = {}
    missing: list[Path] = []
    for relative in relative_paths:
        folder, _, name = relative.rpartition('/')
        if folder not in present:
            try:
                # is_file() knows a plain file from the listing; it stats a link's target.
                present[folder] = {entry.name for entry in os.scandir(media_root / folder)
                                   if entry.is_file()}
            except (FileNotFoundError, NotADirectoryError):
                present[folder] = set()
        if name not in present[folder]:
            missing.append(media_root / folder / name)
    return missing


def other_spelling_hint(path: Path) -> str:
    """A sentence naming the file of ``path``'s folder whose name is ``path``'s name in another
    Unicode normalisation form, or without the whitespace around it, for the error that
    reports ``path`` missing; ``''`` if none is.

    macOS, and archives made there, write names decomposed (NFD: 'e' then a combining accent);
    annotations hold them composed (NFC). Linux compares names byte for byte, so such a file is
    missing by the annotation's name though a listing shows it. So is a file whose name an
    annotation of one's own ends with a carriage return or a space (a list with Windows line
    endings), which a message shows as the name itself.
    """
    wanted = _comparable(path.name)
    try:
        found = next((entry.name for entry in os.scandir(path.parent) if entry.name != path.name
                      and _comparable(entry.name) == wanted), None)
    except (FileNotFoundError, NotADirectoryError):
        return ''
    if found is None:
        return ''
    if found == path.name.strip():
        return (f' ({path.parent} holds {found!r}, which the annotation names {path.name!r}, '
                'with whitespace around it (a line ending or a space a conversion left): strip '
                'each media_path)')
    form = 'NFD' if unicodedata.is_normalized('NFD', found) else 'another normalisation form'
    return (f' ({path.parent} holds {found!r}: the same name in Unicode {form}, as macOS writes '
            "names; rename the files to NFC, e.g. 'convmv -r -f utf8 -t utf8 --nfc --notest "
            "FOLDER', or write each media_path as the folder spells it)")


def _comparable(name: str) -> str:
    """``name`` as :func:`other_spelling_hint` compares names: composed, whitespace stripped."""
    return unicodedata.normalize('NFC', name.strip())


def shown_path(path: Path) -> str:
    """``path`` as a message shows it: as is, or quoted with escapes where it holds a character
    a terminal does not print (a carriage return would send the rest of the line over it)."""
    text = str(path)
    return text if text.isprintable() else repr(text)
