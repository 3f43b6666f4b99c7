from __future__ import annotations

import functools
import subprocess
from collections.abc import Mapping
from pathlib import Path

__version__ = '0.1.0'


def source_commit(root: Path | None = None) -> str | None:
    """The git commit of the xmr source at ``root`` (by default the folder holding this
    package: a source checkout's root when run from one), ``+dirty`` appended when its tracked
    files differ from that commit; ``None`` where ``root`` is no checkout of its own (an
    installed copy, even one inside some other project's repository).

    ``__version__`` stays the same between releases, so a result records this too: which code
    produced a number of a paper table.
    """
    # Resolved here, not at import: setup.py execs this file for __version__, without __file__.
    root = Path(__file__).resolve().parents[1] if root is None else root

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(['git', '-C', str(root), *args], capture_output=True,
                                  text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git('rev-parse', '--show-toplevel')
    if top is None or Path(top).resolve() != root.resolve():
        return None
    commit = git('rev-parse', 'HEAD')
    if commit is None:
        return None
    changes = git('status', '--porcelain', '--untracked-files=no')
    return commit + ('+dirty' if changes else '')


@functools.cache
def _running_commit() -> str | None:
    # Once per process: it runs the code it imported, whatever changes in the checkout later.
    return source_commit()


def provenance() -> dict[str, str | None]:
    """``{'xmr_version', 'xmr_commit'}`` of the running xmr (:func:`source_commit`): what a
    result, a checkpoint's ``meta`` and a language module file record of the xmr that wrote
    them."""
    return {'xmr_version': __version__, 'xmr_commit': _running_commit()}


def written_by(record: Mapping | None) -> str:
    """Which xmr wrote a file whose ``record`` (a checkpoint's ``meta``, a module file) holds
    its :func:`provenance`, and which reads it, for the error of a load that fails on keys a
    newer or older xmr added or renamed.

    Returns:
        e.g. ``'written by xmr 0.2.0 (commit 1a2b...); read by xmr 0.1.0 (commit 3c4d...)'``.
    """
    record = record if isinstance(record, Mapping) else {}
    writer = _named(record) or 'an xmr too old to record its version, or another tool'
    return f'written by {writer}; read by {_named(provenance())}'


def _named(record: Mapping) -> str | None:
    """``'xmr 0.1.0 (commit 1a2b...)'`` of a :func:`provenance` record; ``None`` without one."""
    version = record.get('xmr_version')
    if version is None:
        return None
    commit = record.get('xmr_commit')
    return f'xmr {version} ' + (f'(commit {commit})' if commit else '(an installed copy)')
