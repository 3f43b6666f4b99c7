"""xmr.version.source_commit: the commit a result records."""
from __future__ import annotations

import subprocess
from pathlib import Path

from xmr.version import source_commit


def git(root: Path, *args: str) -> str:
    return subprocess.run(['git', '-C', str(root), '-c', 'user.name=t', '-c', 'user.email=t@t',
                           *args], capture_output=True, text=True, check=True).stdout.strip()


def committed_checkout(root: Path) -> str:
    """Make ``root`` a checkout of one commit holding ``setup.py``; return that commit."""
    git(root, 'init', '-q')
    (root / 'setup.py').write_text('a\n')
    git(root, 'add', 'setup.py')
    git(root, 'commit', '-q', '-m', 'first')
    return git(root, 'rev-parse', 'HEAD')


def test_a_checkout_gives_its_commit_and_says_when_tracked_files_changed(tmp_path):
    head = committed_checkout(tmp_path)
    (tmp_path / 'notes.txt').write_text('untracked\n')
    assert source_commit(tmp_path) == head
    (tmp_path / 'setup.py').write_text('b\n')
    assert source_commit(tmp_path) == f'{head}+dirty'


def test_no_commit_outside_a_checkout_of_its_own(tmp_path):
    assert source_commit(tmp_path) is None
    # An installed copy inside another project's repository is not that project's commit.
    git(tmp_path, 'init', '-q')
    (tmp_path / 'site-packages').mkdir()
    assert source_commit(tmp_path / 'site-packages') is None
    # A repository without a commit yet.
    assert source_commit(tmp_path) is None


def test_no_commit_for_a_folder_inside_another_projects_checkout_with_commits(tmp_path):
    committed_checkout(tmp_path)  # the other project's
    (tmp_path / 'site-packages').mkdir()
    assert source_commit(tmp_path / 'site-packages') is None
