"""tools/gpu_check.sh, run here with a stand-in for the GPU machine's python: its stages run in
the order ``STAGES`` names them; a stage still running at ``DEADLINE_S`` is stopped, no later
stage starts, and the report keeps the rows the stopped benchmark had finished. The next lease's
calls in docs/benchmarks.md are calls the script takes."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO

sys.path.insert(0, str(REPO / 'tools'))
import benchmark  # noqa: E402

#: The GPU machine's python as the script calls it: CUDA there, every install and import fine,
#: a benchmark that prints one finished row and a tier that ends one test on xdist's workers
#: and one alone, and each then runs on past any deadline. Each call's arguments are appended to
#: ``$CALLS``.
STAND_IN = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
case "$*" in
    *cuda.is_available*|"-m pip install"*) exit 0 ;;
    -) cat > /dev/null; exit 0 ;;
    *"import xdist"*) exit 1 ;;
    *"-m pytest"*" -v "*)
        echo "tests/gpu/test_training.py::test_on_xdist "
        echo "[gw0] [ 50%] PASSED tests/gpu/test_training.py::test_on_xdist "
        echo "tests/gpu/test_runs.py::test_a_long_run_on_xdist "
        echo "tests/gpu/test_runs.py::test_alone[schedule0] PASSED                    [ 75%]"
        echo "tests/gpu/test_runs.py::test_alone[schedule1] "
        exec sleep 60 ;;
    *tools/benchmark.py*)
        echo "dasd    cross_lingual  xmr-graphs  amp      16.57 ms/step     3279 MiB"
        echo "    tokens tgt/en 48/32, model 12.00 ms; its fastest step by part, ms: data 4.00"
        exec sleep 60 ;;
    *) echo "- $1 $2" ;;
esac
"""


def run_check(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path, list[str]]:
    """The check run with the stand-in python and ``env``: its process, its report's folder and
    the stand-in's calls."""
    python, calls = tmp_path / 'python3', tmp_path / 'calls'
    python.write_text(STAND_IN)
    python.chmod(0o755)
    wheels, out = tmp_path / 'wheels', tmp_path / 'out'
    wheels.mkdir()
    (wheels / 'stand_in-0-py3-none-any.whl').write_text('')
    done = subprocess.run(['bash', str(REPO / 'tools' / 'gpu_check.sh'), str(wheels), str(out)],
                          env=dict(os.environ, PYTHON=str(python), CALLS=str(calls), **env),
                          capture_output=True, text=True, timeout=50)
    return done, out, calls.read_text().splitlines() if calls.exists() else []


def test_a_stage_running_at_the_deadline_is_stopped_and_its_finished_rows_reported(tmp_path):
    started = time.monotonic()
    done, out, _ = run_check(tmp_path, DEADLINE_S='12', STAGES='compiled loop')
    assert time.monotonic() - started < 30  # the benchmark would have run a minute
    assert done.returncode == 1, done.stderr  # a stage failed: here, stopped
    assert 'not started: DEADLINE_S=12 reached' in done.stdout  # the stage's log too
    report = (out / 'gpu_report.md').read_text()
    compiled = report.split('## compiled step')[1].split('\n## ')[0]
    assert ': exit 124' in compiled
    assert 'dasd    cross_lingual  xmr-graphs  amp      16.57 ms/step' in compiled
    assert 'its fastest step by part, ms: data 4.00' in compiled
    assert "## the training loop's iterations" in report
    assert report.split("## the training loop's iterations")[1].split('\n')[0].endswith(
        'exit 124')


def test_a_tier_cut_by_the_deadline_names_the_tests_it_cut(tmp_path):
    """The lease of 2026-12-04 stopped the tier at its deadline with 39 of 40 tests passed:
    its quiet log, a dot a test, did not say which test it cut."""
    done, out, _ = run_check(tmp_path, DEADLINE_S='12', STAGES='tier')
    assert done.returncode == 1, done.stderr
    tier = (out / 'gpu_report.md').read_text().split('## GPU tier')[1].split('\n## ')[0]
    assert ': exit 124' in tier.splitlines()[0]
    cut = [line.strip() for line in tier.splitlines() if 'not ended: ' in line]
    assert cut == ['not ended: tests/gpu/test_runs.py::test_a_long_run_on_xdist',
                   'not ended: tests/gpu/test_runs.py::test_alone[schedule1]']


def test_the_stages_run_in_the_order_stages_names_them(tmp_path):
    """docs/benchmarks.md's last call of a lease, ``STAGES="loop host"``: the loop's
    iterations first, so that what a deadline cuts short is the host's costs."""
    done, _, calls = run_check(tmp_path, STAGES='loop host')
    assert done.returncode == 0, done.stderr
    tools = [call.split()[0] for call in calls if call.startswith('tools/')]
    assert tools == ['tools/benchmarks/loop_time.py', 'tools/benchmarks/host_costs.py']


def test_a_compiled_run_that_printed_no_summary_line_leaves_the_report_whole(tmp_path):
    """The report's grep for the run's summary failed under ``set -e -o pipefail`` and ended
    the script there: no later section, no ``report:`` line."""
    done, out, _ = run_check(tmp_path, STAGES='run loop')
    report = (out / 'gpu_report.md').read_text()
    assert '    (no summary line: exit 0)' in report.split('## a run compiled as CUDA graphs')[1]
    assert "## the training loop's iterations" in report
    assert f'report: {out}/gpu_report.md' in done.stdout and done.returncode == 0, done.stderr


def test_an_unknown_stage_is_refused_before_anything_is_installed(tmp_path):
    """A misspelt stage would otherwise run nothing and report success, the lease's call spent."""
    done, _, calls = run_check(tmp_path, STAGES='tier compile')
    assert done.returncode == 2
    assert ("STAGES: unknown stage 'compile'; choose from: tier run bench profile host "
            'compiled loop') in done.stderr
    assert not any('pip install' in call for call in calls)


def lease_calls() -> list[dict[str, str]]:
    """The environment of each call of the check in docs/benchmarks.md's plan for the next
    lease (What remains, item 0)."""
    plan = (REPO / 'docs' / 'benchmarks.md').read_text().split('0. The next lease')[1]
    block = plan.split('```bash')[1].split('```')[0].replace('\\\n', ' ')
    calls = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if 'tools/gpu_check.sh' in words and '--download' not in words:
            calls.append(dict(word.split('=', 1) for word in
                              words[:words.index('bash')] if '=' in word))
    return calls


def test_the_next_lease_s_calls_are_calls_the_check_takes(monkeypatch):
    """Each call is its own command on the GPU machine, so each sets its own deadline (an
    exported one would not reach the next call); its stages and benchmark rows exist."""
    import torch

    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)  # the lease's machine
    calls = lease_calls()
    assert calls
    known = re.search(r'^known="(.*)"$', (REPO / 'tools' / 'gpu_check.sh').read_text(),
                      re.MULTILINE)[1].split()
    for env in calls:
        assert 0 < int(env['DEADLINE_S']) < 600, env
        assert set(env['STAGES'].split()) <= set(known), env
        for rows in (env.get('COMPILE_ARGS'), env.get('BENCHMARK_ARGS')):
            if rows:
                benchmark.parse_args(['--device', 'cuda', *rows.split()])
