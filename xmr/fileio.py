"""Atomic file writes: a reader (or a resumed run) sees the old file or the whole new one.

Every write goes to a hidden temporary sibling ``.<name>.<host>-<pid>.tmp``, is flushed and
fsynced, and is renamed over the final name (``os.replace``, atomic on POSIX within one
directory); the directory is fsynced so the rename itself survives a power cut. A failed write
(a full disk, a kill) never leaves a partial file under the final name: the temporary file is
removed on error, and temporaries left by a killed process are removed by
:func:`remove_stale_temporaries`.

:class:`AtomicLocalBackend` routes MMEngine's file backend through the same mechanism; xmr's
:class:`~xmr.engine.hooks.CheckpointHook` saves checkpoints with it.
"""
from __future__ import annotations

import errno
import os
import re
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from mmengine.fileio import LocalBackend, register_backend

__all__ = ['OTHER_HOST_QUIET_SECONDS', 'atomic_open', 'atomic_torch_save', 'atomic_write_bytes',
           'atomic_write_text', 'atomic_write_texts', 'fsync_folder', 'fsync_path',
           'input_written_over', 'process_running', 'remove_stale_temporaries',
           'temporary_path', 'written_path', 'AtomicLocalBackend']

# The host has its dots as underscores, so that the name's end parses back; the host is
# absent in the temporaries of an xmr before 2026-12 (this host's).
_TEMPORARY = re.compile(r'^\.(?P<name>.+)\.(?:(?P<host>[^.]+)-)?(?P<pid>\d+)\.tmp$')

#: How long a file or folder written on another host may go unchanged before this host takes it
#: for left by a killed process: it cannot ask after another host's processes, and a running
#: write changes its file as it goes.
OTHER_HOST_QUIET_SECONDS = 600


def input_written_over(out: str | os.PathLike,
                       inputs: Iterable[str | os.PathLike | None]) -> str | os.PathLike | None:
    """The input among ``inputs`` (``None`` entries skipped) that writing ``out`` would replace
    (the same file, however named); ``None`` when there is none. A tool refuses such an output
    before it writes: the input (a training checkpoint, a released file) would be lost."""
    target = Path(out).resolve()
    return next((given for given in inputs
                 if given is not None and Path(given).resolve() == target), None)


def temporary_path(path: str | os.PathLike) -> Path:
    """This process's temporary sibling of ``path`` (``.<name>.<host>-<pid>.tmp``), which
    :func:`remove_stale_temporaries` removes once its process is gone."""
    path = Path(path)
    return path.with_name(f'.{path.name}.{_host_in_names()}-{os.getpid()}.tmp')


def _host_in_names() -> str:
    return socket.gethostname().replace('.', '_')


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's or a folder's data and metadata to disk (a folder: its entries, so that
    a rename into it survives a power cut)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_folder(folder: str | os.PathLike) -> None:
    """:func:`fsync_path` every file of ``folder`` (not recursive), then the folder: what a
    folder written under a temporary name holds is on disk before the folder is renamed."""
    folder = Path(folder)
    for entry in folder.iterdir():
        if entry.is_file():
            fsync_path(entry)
    fsync_path(folder)


def written_path(path: str | os.PathLike) -> Path:
    """The file a write to ``path`` replaces: the one a link there points to (a rename over
    the link made it a file of its own, and the shared file it pointed to kept its old text).

    Raises:
        FileNotFoundError: ``path`` starts with a folder ``~`` or ``~user`` that a shell would
            expand and that does not exist: Python does not expand it, and the write would
            make a folder of that name (a file named ``~draft.json`` is written as named).
    """
    path = Path(path)
    head = path.parts[0] if len(path.parts) > 1 else ''
    if head.startswith('~') and os.path.expanduser(head) != head and not Path(head).is_dir():
        raise FileNotFoundError(errno.ENOENT, f"{path}: starts with {head!r}, which only a "
                                'shell expands: give the folder itself '
                                f'({os.path.expanduser(head)})')
    return Path(os.path.realpath(path)) if path.is_symlink() else path


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = 'wb', **kwargs) -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; it replaces ``path`` on a clean exit.

    Args:
        path: the final file name (a link: the file it points to, :func:`written_path`); its
            directory is created.
        mode: ``'wb'`` or ``'w'`` (``kwargs`` go to :func:`open`, e.g. ``encoding``).

    Raises:
        OSError: writing failed (e.g. ``ENOSPC``); the message names ``path`` and says that the
            previous file, if any, is unchanged. Nothing is left under either name.
    """
    path = written_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_path(path)
    try:
        with open(temporary, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        fsync_path(path.parent)
    except OSError as error:
        raise _write_failed(path, error, 'the previous file, if any, is unchanged') from error
    finally:
        _discard([temporary])


def _discard(temporaries: Iterable[Path]) -> None:
    """Remove temporary files a failed write leaves, if any: on a read-only file system even
    the unlink of a file never made fails, and would hide the write's own error."""
    for temporary in temporaries:
        with suppress(OSError):
            temporary.unlink(missing_ok=True)


def _write_failed(path: Path, error: OSError, unchanged: str) -> OSError:
    reason = error.strerror or str(error)
    hint = ': free some space' if error.errno == errno.ENOSPC else ''
    return OSError(error.errno, f'{path}: writing failed ({reason}); {unchanged}{hint}')


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_open`)."""
    with atomic_open(path, 'wb') as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike, text: str | Iterable[str]) -> None:
    """Write ``text`` to ``path`` atomically as UTF-8 with ``\\n`` line ends; ``text`` may be
    given as its pieces in order (a generator: made as it is written, never held whole)."""
    with atomic_open(path, 'w', encoding='utf-8', newline='\n') as handle:
        handle.writelines([text] if isinstance(text, str) else text)


def atomic_write_texts(texts: Mapping[str | os.PathLike, str | Iterable[str]]) -> list[Path]:
    """Write several UTF-8 files, all or none (the outputs of one conversion).

    Every file is written to its temporary sibling first; only when all are written are they
    renamed over their final names. A path that is a folder is refused before anything is
    written, so that no rename fails part-way. Temporaries that killed processes left in the
    files' folders are removed first (:func:`remove_stale_temporaries`).

    Args:
        texts: path (a link: the file it points to, :func:`written_path`) -> its text, or the
            pieces of its text in order (a generator: the text is made as it is written and
            never held whole).

    Returns:
        The paths written, in order.

    Raises:
        ValueError: two paths are one file (a link and the file it points to); nothing is
            written.
        OSError: a path is a folder, or a write failed (e.g. ``ENOSPC``); the message names the
            file, and no file of the set is written or changed (a rename that fails, which
            only an outside change can cause once every file is written, says how many were
            replaced before it). No temporary file is left.
    """
    paths, given = {}, {}
    for name, text in texts.items():
        path = written_path(name)
        real = os.path.realpath(path)
        if real in given:
            raise ValueError(f'{name} and {given[real]} are one file ({real}); nothing of this '
                             'set was written')
        given[real], paths[path] = name, text
    for path in paths:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, f'{path}: is a folder, not a file; nothing '
                                    'of this set was written')
    # The outputs of one conversion go where an earlier one may have been killed as it wrote.
    for folder in {path.parent for path in paths}:
        remove_stale_temporaries(folder)
    temporaries: list[Path] = []
    try:
        for path, text in paths.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            temporaries.append(temporary_path(path))
            with open(temporaries[-1], 'w', encoding='utf-8', newline='\n') as handle:
                handle.writelines([text] if isinstance(text, str) else text)
                handle.flush()
                os.fsync(handle.fileno())
    except BaseException as error:
        # The pieces of a text may fail as they are made (or be interrupted), not only the disk.
        _discard(temporaries)
        if isinstance(error, OSError):
            raise _write_failed(path, error,
                                'no file of this set was written or changed') from error
        raise
    replaced = 0
    try:
        for path, temporary in zip(paths, temporaries):
            os.replace(temporary, path)
            replaced += 1
    except OSError as error:
        _discard(temporaries[replaced:])
        raise _write_failed(path, error, f'{replaced} file(s) of this set replaced before it'
                            ) from error
    for folder in {path.parent for path in paths}:
        fsync_path(folder)
    return [Path(path) for path in texts]


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save(obj, path)`` atomically (see :func:`atomic_open`); returns ``path``."""
    import torch

    with atomic_open(path, 'wb') as handle:
        torch.save(obj, handle)
    return Path(path)


def process_running(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (``False`` for a non-positive ``pid``)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(directory: str | os.PathLike) -> list[Path]:
    """Remove the temporaries that dead processes left in ``directory`` (not recursive).

    A temporary of a live process (another rank, or this one) is kept; one of another host
    (a shared work dir, a test run on another node while training writes a checkpoint) is kept
    until it has gone unchanged for ``OTHER_HOST_QUIET_SECONDS``.

    Returns:
        The removed paths, sorted.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for entry in sorted(directory.iterdir()):
        match = _TEMPORARY.match(entry.name)
        if match and entry.is_file() and not _writer_running(entry, match['host'],
                                                              int(match['pid'])):
            entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


def _writer_running(temporary: Path, host: str | None, pid: int) -> bool:
    if host is None or host == _host_in_names():
        return process_running(pid)
    try:
        return time.time() - temporary.stat().st_mtime < OTHER_HOST_QUIET_SECONDS
    except FileNotFoundError:  # renamed into place meanwhile
        return True


@register_backend('xmr_atomic_local')
class AtomicLocalBackend(LocalBackend):
    """MMEngine's local file backend with atomic ``put`` and ``put_text``.

    Select it with ``backend_args=dict(backend='xmr_atomic_local')``.
    """

    def put(self, obj: bytes, filepath: str | Path) -> None:
        atomic_write_bytes(filepath, obj)

    def put_text(self, obj: str, filepath: str | Path, encoding: str = 'utf-8') -> None:
        with atomic_open(filepath, 'w', encoding=encoding, newline='\n') as handle:
            handle.write(obj)
