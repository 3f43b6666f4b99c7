"""tools/gpu_check.sh's deadline, run here with a stand-in for the GPU machine's python: a stage
still running at ``DEADLINE_S`` is stopped, no later stage starts, and the report keeps the
rows the stopped benchmark had finished."""
from __future__ import annotations

import os
import subprocess
import time

from tests.conftest import REPO

#: The GPU machine's python as the script calls it: CUDA there, every install and import fine,
#: a benchmark that prints one finished row and then runs on past any deadline.
STAND_IN = """#!/usr/bin/env bash
case "$*" in
    *cuda.is_available*|"-m pip install"*) exit 0 ;;
    -) cat > /dev/null; exit 0 ;;
    *"import xdist"*) exit 1 ;;
    *tools/benchmark.py*)
        echo "dasd    cross_lingual  xmr-graphs  amp      16.57 ms/step     3279 MiB"
        echo "    tokens tgt/en 48/32, model 12.00 ms; its fastest step by part, ms: data 4.00"
        exec sleep 60 ;;
    *) echo "- $1 $2" ;;
esac
"""


def test_a_stage_running_at_the_deadline_is_stopped_and_its_finished_rows_reported(tmp_path):
    python = tmp_path / 'python3'
    python.write_text(STAND_IN)
    python.chmod(0o755)
    wheels, out = tmp_path / 'wheels', tmp_path / 'out'
    wheels.mkdir()
    (wheels / 'stand_in-0-py3-none-any.whl').write_text('')
    env = dict(os.environ, PYTHON=str(python), DEADLINE_S='12', STAGES='compiled loop')
    started = time.monotonic()
    done = subprocess.run(['bash', str(REPO / 'tools' / 'gpu_check.sh'), str(wheels), str(out)],
                          env=env, capture_output=True, text=True, timeout=50)
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
