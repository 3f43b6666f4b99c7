"""Where a run writes: the work directory every tool derives from a config the same way, its
latest checkpoint, and the lock a training run holds on it (the lock file any tool may take
on what it writes: :func:`take_lock`)."""
from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import os.path as osp
import re
import socket
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from mmengine.config import Config

from xmr.fileio import process_running, remove_stale_temporaries, temporary_path


def resolve_work_dir(cfg: Config, config_path: str | os.PathLike,
                     work_dir: str | None = None, suffix: str = '') -> str:
    """Set and return ``cfg.work_dir``: ``work_dir`` when given, else the config's own
    ``work_dir`` plus ``suffix``, else ``work_dirs/<config name><suffix>`` (``suffix``: the
    run's ablations, so that each row keeps its own folder, and ``--resume auto`` never picks
    up another row's run).

    ``tools/train.py``, ``tools/test.py`` and ``tools/cache_features.py`` agree through this, so
    that a cache built ahead of time lies where training looks for it.
    """
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is not None:
        if suffix:
            own = osp.normpath(str(cfg.work_dir))
            # '.' + '_no-sc' would be a hidden folder: the rows go beside the folder it names.
            cfg.work_dir = (osp.abspath(own) if osp.basename(own) in ('.', '..') else own) + suffix
    else:
        cfg.work_dir = osp.join('work_dirs',
                                osp.splitext(osp.basename(str(config_path)))[0] + suffix)
    return cfg.work_dir


def training_checkpoints(work_dir: str | os.PathLike) -> list[str]:
    """The names of the checkpoints a training run saved in ``work_dir`` (``iter_*.pth``,
    ``best_*.pth``), sorted; the files decide, not ``last_checkpoint``, which a copied work dir
    may lack or whose file may be deleted."""
    return sorted(osp.basename(path) for pattern in ('iter_*.pth', 'best_*.pth')
                  for path in glob.glob(osp.join(glob.escape(str(work_dir)), pattern)))


def clear_partial_files(folder: str | os.PathLike, warn: Callable[[str], Any]) -> None:
    """Remove the partial files (``.<name>.<host>-<pid>.tmp``) that runs killed while writing
    left in ``folder`` (:func:`~xmr.fileio.remove_stale_temporaries`), each told to ``warn``
    (a runner's ``logger.warning``)."""
    for path in remove_stale_temporaries(folder):
        warn(f'removed {path}, a partial file of an interrupted run')


def checkpoints_past(work_dir: str | os.PathLike, iteration: int) -> list[str]:
    """The names of the checkpoints a training run saved in ``work_dir`` at an iteration past
    ``iteration`` (``iter_<n>.pth``, ``best_<key>_iter_<n>.pth`` with ``n > iteration``), by
    iteration: those a run resumed at ``iteration`` would overwrite or leave beside its own."""
    numbered = [(int(match[1]), name) for name in training_checkpoints(work_dir)
                if (match := re.search(r'(?:^|_)iter_(\d+)\.pth$', name))]
    return [name for number, name in sorted(numbered) if number > iteration]


def newest_periodic_checkpoint(work_dir: str | os.PathLike) -> str | None:
    """The ``iter_<n>.pth`` of ``work_dir`` with the largest ``n``, or ``None``: the checkpoint
    ``last_checkpoint`` names, where a kill came between saving the first checkpoint and its
    pointer (or the work dir was copied without the pointer)."""
    numbered = [(int(match[1]), path) for path in glob.glob(
        osp.join(glob.escape(str(work_dir)), 'iter_*.pth'))
        if (match := re.fullmatch(r'iter_(\d+)\.pth', osp.basename(path)))]
    return max(numbered)[1] if numbered else None


def latest_checkpoint(work_dir: str | os.PathLike) -> str | None:
    """The checkpoint that ``<work_dir>/last_checkpoint`` names, or ``None`` when there is none.

    The work dir's own file of that name is taken first (:func:`own_file`). A file elsewhere
    is taken unless its folder is another run's work dir (it holds a ``last_checkpoint`` of
    its own) while this one holds periodic checkpoints: a copy of that run's work dir, whose
    pointer still names the original's checkpoint. Checkpoints saved to another folder (the
    checkpoint hook's ``out_dir``, also one set part-way through a run) are taken: MMEngine
    writes ``last_checkpoint`` in the work dir alone.

    Raises:
        FileNotFoundError: ``last_checkpoint`` names a file that does not exist, or one in
            another run's work dir while this one holds periodic checkpoints of its own but not
            that one (both named).
    """
    pointer = osp.join(str(work_dir), 'last_checkpoint')
    if not osp.isfile(pointer):
        return None
    with open(pointer, encoding='utf-8') as handle:
        checkpoint = handle.read().strip()
    own = own_file(work_dir, checkpoint)
    if own is not None:
        return own
    if not osp.isfile(checkpoint):
        raise FileNotFoundError(f'{pointer}: names {checkpoint!r}, which does not exist; resume '
                                'from a checkpoint by path: --resume PATH')
    newest = newest_periodic_checkpoint(work_dir)
    if newest is not None and osp.isfile(osp.join(osp.dirname(checkpoint), 'last_checkpoint')):
        raise FileNotFoundError(
            f'{pointer}: names {checkpoint!r}, which is not in this work dir (a copy of '
            f"another run's?), and the work dir holds no {osp.basename(checkpoint)} of its "
            f'own; resume from a checkpoint by path: --resume {newest} (its newest) or '
            f'--resume {checkpoint}')
    return checkpoint


def own_file(work_dir: str | os.PathLike, recorded: str) -> str | None:
    """``work_dir``'s own file of the name of ``recorded`` (a checkpoint's path that MMEngine
    recorded), or ``None`` when it has none. MMEngine records absolute paths: a work dir moved
    or copied elsewhere names the files where they were written, and holds its own of those
    names, which are the ones meant."""
    own = osp.join(str(work_dir), osp.basename(recorded))
    return own if osp.isfile(own) else None


#: The lock file a training run holds in its work dir.
LOCK_NAME = '.train.lock'
#: Seconds a lock file without a holder's line is given to get one before it counts as stale: a
#: lock created in place (a file system without hard links) is empty until its run writes it.
EMPTY_LOCK_GRACE_S = 5.0


class WorkDirLockedError(RuntimeError):
    """Another training run holds the work dir."""


def _lock_holder(path: str) -> tuple[int, str, str | None]:
    """PID, host and start time (``None`` in locks written without one) of the lock's writer."""
    try:
        with open(path, encoding='utf-8') as handle:
            return _parse_holder(handle.read())
    except OSError:
        return -1, '', None  # removed meanwhile


def _parse_holder(text: str) -> tuple[int, str, str | None]:
    """The PID, host and start time a lock file's ``text`` names."""
    try:
        pid, host, *started = text.split()
        return int(pid), host, started[0] if started else None
    except ValueError:
        return -1, '', None  # empty: written by an earlier xmr killed before it wrote


def process_start_time(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``), or
    ``None`` where that cannot be read: with the PID it names one process for good, since a
    restarted machine or container hands the same PIDs to other processes."""
    try:
        with open(f'/proc/{pid}/stat', encoding='utf-8') as handle:
            # The command name may hold spaces and parentheses: fields count from its end.
            return handle.read().rsplit(')', 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _holder_alive(pid: int, started: str | None) -> bool:
    """The lock's writer still runs: its PID is live and, where both are known, started when
    the lock says (else the PID now names another process)."""
    if not process_running(pid):
        return False
    now = process_start_time(pid)
    return started is None or now is None or now == started


def lock_work_dir(work_dir: str | os.PathLike) -> str | None:
    """Take ``<work_dir>/.train.lock`` for this process (:func:`take_lock`).

    Returns:
        A line for the log when a stale lock was taken over, else ``None``.

    Raises:
        WorkDirLockedError: a running process holds the lock (or one on another host, whose
            liveness cannot be checked); the message names its PID and the lock file.
    """
    os.makedirs(work_dir, exist_ok=True)
    return take_lock(osp.join(str(work_dir), LOCK_NAME), str(work_dir),
                     partial(_work_dir_in_use, work_dir))


def refuse_running_training(work_dir: str | os.PathLike) -> None:
    """Refuse, without taking it, a work dir whose lock a running training holds (as
    :func:`lock_work_dir` would): checked before its checkpoints are, which are that run's, not
    an earlier run's to resume or remove.

    Raises:
        WorkDirLockedError: as :func:`lock_work_dir`'s.
    """
    path = osp.join(str(work_dir), LOCK_NAME)
    if not osp.isfile(path):
        return
    holder = _lock_holder(path)
    if holder[0] == -1 or _held_here(holder):
        return
    refused = _refusal_if_running(path, holder, socket.gethostname(),
                                  partial(_work_dir_in_use, work_dir))
    if refused is not None:
        raise refused


def _work_dir_in_use(work_dir: str | os.PathLike, holder: str, fix: str) -> WorkDirLockedError:
    return WorkDirLockedError(f'{work_dir}: another training run ({holder}) is using this work '
                              f'dir (lock file {osp.join(str(work_dir), LOCK_NAME)}); wait for it '
                              f'or stop it, or train into another --work-dir{fix}')


def take_lock(path: str, subject: str,
              refusal: Callable[[str, str], Exception]) -> str | None:
    """Take the lock file ``path`` for this process (PID, host and start time written in it).

    A lock whose process is gone (killed, crashed, or an earlier holder in this process) is
    taken over, and so is one left without its line for :data:`EMPTY_LOCK_GRACE_S`. Of several
    processes that start at once, or take over the same stale lock at once, exactly one gets
    the lock; the others are refused.

    Args:
        path: the lock file; its folder exists.
        subject: what the lock guards, for the take-over line (a work dir, an index).
        refusal: the error of a lock held by a running process, or by one on another host,
            whose liveness cannot be checked: made of the holder (``PID 12 on node-a``) and a
            fix to append where it may be gone (``; if it is gone, delete <path>``).

    Returns:
        A line for the log when a stale lock was taken over, else ``None``.
    """
    host = socket.gethostname()
    taken_over, empty_since = None, None
    while not _create_lock(path, host):
        pid, holder_host, started = _lock_holder(path)
        if _held_here((pid, holder_host, started)):
            return None  # taken already (tools/train.py takes it before the runner exists)
        if pid == -1:  # empty: being written by a process that has just created it, or stale
            empty_since = empty_since or time.monotonic()
            if time.monotonic() - empty_since < EMPTY_LOCK_GRACE_S:
                time.sleep(0.05)
                continue
        refused = _refusal_if_running(path, (pid, holder_host, started), host, refusal)
        if refused is not None:
            raise refused
        if _remove_if_unchanged(path, (pid, holder_host, started)):
            why = ('its PID now names another process than the one that wrote the lock'
                   if process_running(pid) else 'an interrupted run')
            taken_over = (f'{subject}: took over the lock of PID {pid}, which is no longer '
                          f'running ({why})')
    return taken_over


def _refusal_if_running(path: str, holder: tuple[int, str, str | None], host: str,
                        refusal: Callable[[str, str], Exception]) -> Exception | None:
    """``refusal`` (:func:`take_lock`'s) of the lock ``path`` whose ``holder`` is running, or
    is on another host than ``host`` (its liveness cannot be checked); ``None`` for one gone."""
    pid, holder_host, started = holder
    elsewhere = holder_host not in ('', host)
    if elsewhere or _holder_alive(pid, started):
        return refusal(f'PID {pid}' + (f' on {holder_host}' if elsewhere else ''),
                       f'; if it is gone, delete {path}' if elsewhere else '')
    return None


def release_lock(path: str) -> None:
    """Remove the lock file ``path`` of :func:`take_lock` if this process holds it."""
    if _held_here(_lock_holder(path)):
        os.remove(path)


def _create_lock(path: str, host: str) -> bool:
    """Create the lock file at ``path`` naming this process, unless one exists.

    The line is written to a temporary file first and linked to ``path``: a lock file appears
    with its content, so another run never reads an empty one and takes it for stale. A file
    system without hard links (a FUSE object store) gets the file created in place, as an
    exclusive create, and written. A temporary left by a kill is removed by
    :func:`~xmr.fileio.remove_stale_temporaries`.
    """
    started = process_start_time(os.getpid())
    line = f'{os.getpid()} {host}' + (f' {started}' if started else '') + '\n'
    temporary = temporary_path(path)
    with open(temporary, 'w', encoding='utf-8') as handle:
        handle.write(line)
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    except OSError:  # no hard links here
        return _create_in_place(path, line)
    finally:
        os.remove(temporary)
    return True


def _create_in_place(path: str, line: str) -> bool:
    """Create ``path`` exclusively and write ``line`` in it; ``False`` when it exists."""
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, 'w', encoding='utf-8') as handle:
        handle.write(line)
    return True


def _remove_if_unchanged(path: str, holder: tuple[int, str, str | None]) -> bool:
    """Remove the stale lock file at ``path`` if it still names ``holder``.

    Two runs may find the same stale lock: the first removes it and creates its own, which the
    second must not remove. Each removes only under ``flock`` on the file, after checking that
    ``path`` still is that file (its open descriptor keeps the inode from being reused) and
    that it names the holder judged stale. The kernel drops a killed process's ``flock``; stale
    locks are taken over on their writer's host only, so a lock local to it suffices (NFS too).
    A file system that refuses ``flock`` (Lustre mounted without it) is left the checks alone,
    which narrow the race without closing it, as xmr took locks over before.

    Returns:
        Whether it was removed; ``False`` when another run took it over meanwhile.
    """
    try:
        handle = open(path, 'r+', encoding='utf-8')  # NFS locks exclusively only for writers
    except FileNotFoundError:
        return False
    with handle:
        with contextlib.suppress(OSError):  # no flock here: the checks below alone
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            unchanged = os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
        except FileNotFoundError:
            return False
        if not unchanged or _parse_holder(handle.read()) != holder:
            return False
        os.remove(path)
    return True


def unlock_work_dir(work_dir: str | os.PathLike) -> None:
    """Release the lock of :func:`lock_work_dir` if this process holds it."""
    release_lock(osp.join(str(work_dir), LOCK_NAME))


def work_dir_locked_here(work_dir: str | os.PathLike) -> bool:
    """Whether this process holds ``work_dir``'s lock."""
    return _held_here(_lock_holder(osp.join(str(work_dir), LOCK_NAME)))


def _held_here(holder: tuple[int, str, str | None]) -> bool:
    """Whether a lock's ``(pid, host, start time)`` names this process: its PID alone named a
    process of another node that failed (and released a live run's lock), or an earlier
    process of a restarted container (whose stale lock was kept, for a second run to take)."""
    pid, host, started = holder
    now = process_start_time(os.getpid())
    return (pid == os.getpid() and host == socket.gethostname()
            and (started is None or now is None or started == now))
