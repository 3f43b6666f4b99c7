from __future__ import annotations

import subprocess
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
