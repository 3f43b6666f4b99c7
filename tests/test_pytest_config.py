"""The suite's own settings: a hung test fails on its own, well inside CI's limit."""
from __future__ import annotations

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
