"""Where a run writes: the work directory every tool derives from a config the same way, its
latest checkpoint, and the lock a training run holds on it."""
from __future__ import annotations

import contextlib
import os
import os.path as osp
import socket

from mmengine.config import Config

from xmr.fileio import process_running


def resolve_work_dir(cfg: Config, config_path: str | os.PathLike,
                     work_dir: str | None = None, suffix: str = '') -> str:
    """Set and return ``cfg.work_dir``: ``work_dir`` when given, else the config's own
    ``work_dir``, else ``work_dirs/<config name><suffix>`` (``suffix``: the run's ablations).

    ``tools/train.py``, ``tools/test.py`` and ``tools/cache_features.py`` agree through this, so
    that a cache built ahead of time lies where training looks for it.
    """
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('work_dirs',
                                osp.splitext(osp.basename(str(config_path)))[0] + suffix)
    return cfg.work_dir


def latest_checkpoint(work_dir: str | os.PathLike) -> str | None:
    """The checkpoint that ``<work_dir>/last_checkpoint`` names, or ``None`` when there is none.

    Raises:
        FileNotFoundError: ``last_checkpoint`` names a file that does not exist.
    """
    pointer = osp.join(str(work_dir), 'last_checkpoint')
    if not osp.isfile(pointer):
        return None
    with open(pointer, encoding='utf-8') as handle:
        checkpoint = handle.read().strip()
    # MMEngine writes the absolute path: a work dir moved or copied elsewhere names the file
    # where it was; this work dir's own file of that name is the one meant.
    own = osp.join(str(work_dir), osp.basename(checkpoint))
    if osp.isfile(own):
        return own
    if not osp.isfile(checkpoint):
        raise FileNotFoundError(f'{pointer}: names {checkpoint!r}, which does not exist; resume '
                                'from a checkpoint by path: --resume PATH')
    return checkpoint


#: The lock file a training run holds in its work dir.
LOCK_NAME = '.train.lock'


class WorkDirLockedError(RuntimeError):
    """Another training run holds the work dir."""


def _lock_holder(path: str) -> tuple[int, str, str | None]:
    """PID, host and start time (``None`` in locks written without one) of the lock's writer."""
    try:
        with open(path, encoding='utf-8') as handle:
            pid, host, *started = handle.read().split()
        return int(pid), host, started[0] if started else None
    except (OSError, ValueError):
        return -1, '', None  # removed meanwhile, or written by a process killed before it wrote


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
    """Take ``<work_dir>/.train.lock`` for this process (PID and host written in it).

    A lock whose process is gone (killed, crashed, or an earlier run in this process) is taken
    over.

    Returns:
        A line for the log when a stale lock was taken over, else ``None``.

    Raises:
        WorkDirLockedError: a running process holds the lock (or one on another host, whose
            liveness cannot be checked); the message names its PID and the lock file.
    """
    os.makedirs(work_dir, exist_ok=True)
    path = osp.join(str(work_dir), LOCK_NAME)
    host = socket.gethostname()
    taken_over = None
    while True:
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            pid, holder_host, started = _lock_holder(path)
            if pid == os.getpid() and holder_host == host:
                return None  # taken already (tools/train.py takes it before the runner exists)
            elsewhere = holder_host not in ('', host)
            if elsewhere or _holder_alive(pid, started):
                where = f' on {holder_host}' if elsewhere else ''
                gone = f'; if it is gone, delete {path}' if elsewhere else ''
                raise WorkDirLockedError(
                    f'{work_dir}: another training run (PID {pid}{where}) is using this work '
                    f'dir (lock file {path}); wait for it or stop it, or train into another '
                    f'--work-dir{gone}') from None
            why = ('its PID now names another process than the one that wrote the lock'
                   if process_running(pid) else 'an interrupted run')
            taken_over = (f'{work_dir}: took over the lock of PID {pid}, which is no longer '
                          f'running ({why})')
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            continue
        with os.fdopen(descriptor, 'w', encoding='utf-8') as handle:
            started = process_start_time(os.getpid())
            handle.write(f'{os.getpid()} {host}' + (f' {started}' if started else '') + '\n')
        return taken_over


def unlock_work_dir(work_dir: str | os.PathLike) -> None:
    """Release the lock of :func:`lock_work_dir` if this process holds it."""
    path = osp.join(str(work_dir), LOCK_NAME)
    if _lock_holder(path)[0] == os.getpid():
        os.remove(path)
