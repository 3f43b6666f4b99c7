"""xmr.version.source_commit: the commit a result records."""
from __future__ import annotations

import subprocess
from pathlib import Path

import xmr
from xmr.version import provenance, source_commit, written_by


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


def test_a_file_records_the_running_xmr_and_a_failed_load_names_both_xmrs():
    here = provenance()
    assert here == {'xmr_version': xmr.__version__, 'xmr_commit': source_commit()}
    reader = f"xmr {xmr.__version__} " + (f"(commit {here['xmr_commit']})" if here['xmr_commit']
                                          else '(an installed copy)')
    assert written_by({'xmr_version': '0.2.0', 'xmr_commit': 'abc123+dirty', 'iter': 4}) == (
        f'written by xmr 0.2.0 (commit abc123+dirty); read by {reader}')
    assert written_by({'xmr_version': '0.2.0', 'xmr_commit': None}) == (
        f'written by xmr 0.2.0 (an installed copy); read by {reader}')
    for unrecorded in ({'iter': 4}, None):  # a meta of before this record, or no meta at all
        assert written_by(unrecorded) == ('written by an xmr too old to record its version, or '
                                          f'another tool; read by {reader}')
