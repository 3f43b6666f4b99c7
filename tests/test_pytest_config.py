"""The suite's own settings: a hung test fails on its own, well inside CI's limit, and a
failure pytest-xdist cannot send as it is does not end the run."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO

CI_LIMIT_S = 90 * 60


def test_a_test_past_the_configured_timeout_fails_with_its_stack(tmp_path):
    hung = tmp_path / 'test_hung.py'
    hung.write_text('import time\n\n\ndef test_hung():\n    time.sleep(60)\n')
    result = subprocess.run(
        [sys.executable, '-m', 'pytest', '-c', str(REPO / 'pyproject.toml'), '--rootdir',
         str(tmp_path), '-p', 'no:cacheprovider', '-o', 'timeout=1', str(hung)],
        capture_output=True, text=True, timeout=50, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'Timeout (>1.0s) from pytest-timeout' in result.stdout
    assert 'time.sleep(60)' in result.stdout


def test_the_configured_timeout_leaves_ci_time_for_the_other_tests(pytestconfig):
    timeout = float(pytestconfig.getini('timeout'))
    # One hang costs a worker at most this long: under a third of CI's limit.
    assert 60 <= timeout <= CI_LIMIT_S / 3


def test_a_failure_naming_bytes_that_are_not_utf8_is_reported_by_an_xdist_worker(tmp_path):
    """The failure's text and its captured log hold a lone surrogate (a file named in Latin-1
    bytes): the worker reports them escaped, and the run ends with its summary, not in an
    INTERNALERROR."""
    failing = tmp_path / 'test_latin1.py'
    failing.write_text(
        'import logging\nimport os\n\n\ndef test_latin1():\n'
        "    logging.getLogger('x').warning(os.fsdecode(b'logged mod\\xe8le'))\n"
        "    assert os.fsdecode(b'mod\\xe8le') == 'modele'\n")
    result = subprocess.run(
        [sys.executable, '-m', 'pytest', '-c', str(REPO / 'pyproject.toml'), '--rootdir',
         str(tmp_path), '-p', 'no:cacheprovider', '-p', 'tests.plugin', '-n', '1',
         str(failing)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert 'INTERNALERROR' not in result.stdout, result.stdout
    assert result.returncode == 1 and '1 failed' in result.stdout
    assert "AssertionError: assert 'mod\\udce8le' == 'modele'" in result.stdout
    assert 'logged mod\\udce8le' in result.stdout


def test_a_tmp_path_is_named_short_and_kept_only_when_its_test_fails(tmp_path):
    """conftest's ``tmp_path``: ``t<N>``, not the test's name (a checkpoint path in a config
    past yapf's 79 columns cost up to 1.4 s a format), removed after a passing test as
    ``tmp_path_retention_policy = "failed"`` says."""
    tests = tmp_path / 'test_folders.py'
    tests.write_text("def test_passes(tmp_path):\n    (tmp_path / 'file').write_text('x')\n\n\n"
                     "def test_fails(tmp_path):\n    (tmp_path / 'file').write_text('x')\n"
                     '    assert False\n')
    base = tmp_path / 'base'
    result = subprocess.run(
        [sys.executable, '-m', 'pytest', '-c', str(REPO / 'pyproject.toml'), '--rootdir',
         str(tmp_path), '-p', 'no:cacheprovider', '-p', 'tests.plugin', '--basetemp',
         str(base), str(tests)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 1 and '1 failed, 1 passed' in result.stdout, result.stdout
    # (and pytest's link to the latest folder, tcurrent)
    assert [(folder.name, [f.name for f in folder.iterdir()]) for folder in base.iterdir()
            if not folder.is_symlink()] == [('t1', ['file'])]


def test_yapf_s_grammar_cache_is_written_before_any_xdist_worker_starts(tmp_path):
    """yapf publishes its grammar cache empty for a moment; the controller's configure writes
    it, so workers find it whole (an EOFError once ended a fresh venv's run)."""
    script = ('import os, tests.plugin as p; p.pytest_configure(); '
              "print(sorted(f for _, _, fs in os.walk(os.environ['XDG_CACHE_HOME']) for f in fs))")
    env = {k: v for k, v in os.environ.items() if k != 'PYTEST_XDIST_WORKER_COUNT'}
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                            timeout=120, cwd=REPO, env=dict(env, XDG_CACHE_HOME=str(tmp_path)))
    assert result.returncode == 0, result.stderr
    version = '.'.join(map(str, sys.version_info[:3]))
    assert f'PatternGrammar-py{version}.{sys.version_info.releaselevel}.' in result.stdout
