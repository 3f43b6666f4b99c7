#!/usr/bin/env bash
# The GPU check of a bare CUDA machine with no network: install xmr's missing dependencies from
# local wheels next to the machine's own torch (never replacing it), then run the GPU test tier
# and the CUDA benchmark, and write a report.
#
#   bash tools/gpu_check.sh --download DIR   # on a machine with network: fetch the wheels of
#                                            # requirements/gpu_wheels.txt for Linux x86-64
#   bash tools/gpu_check.sh [WHEELS [OUT]]   # on the GPU machine (defaults: .whl, gpu_report)
#
# The script runs in the repository's root: a relative DIR, WHEELS or OUT is taken from there,
# wherever it is called from.
#
# Environment: PYTHON (python3), PYTHON_VERSION of the GPU machine for --download (3.12),
# TIER_MARK (the tier's pytest marker expression, default "gpu"; "gpu and not slow" leaves out
# the whole runs: about 1.5 minutes instead of 5.5),
# BENCHMARK_ARGS (extra tools/benchmark.py arguments, e.g. "--cases cross_lingual"),
# PROFILE_ARGS (the profiled rows; default: DASD cross_lingual and eval in bf16),
# STAGES (the stages to run, in the order named; default "tier bench profile host"; on an
# H200 the first three took about 5.5, 5 and 1 minutes, so a lease with a 10-minute limit per
# command runs them as two calls: STAGES=tier, then STAGES="bench profile host", each writing
# its part of the report; the stage "host", under a minute, is tools/benchmarks/host_costs.py:
# the host's costs per trained tensor and per module, apart from the step
# (HOST_ARGS="--compile reduce-overhead" adds the clip and the AdamW step compiled, without
# CUDA graphs); the stage "compiled", not run by default, times DASD's compiled step and
# evaluation beside the eager ones in bf16, COMPILE_ARGS changing its rows: about 5 minutes,
# most of it compiling (50 to 85 s a compiled row on an H200); the stage "run", not run by
# default either, is the tier's test of a whole run compiled as CUDA graphs, which the stage
# "tier" leaves out: the shortened DASD demo, eager then compiled, their mAR and step times;
# about 5.5 minutes on an H200; the stage "loop", not run by default, is
# tools/benchmarks/loop_time.py: DASD's cross-lingual phase trained by the Runner's loop at
# ViT-B/32 size, its iteration times as the run logs them, their parts on the host and the
# paper's phase projected from them, LOOP_ARGS its arguments (default: bf16, compiled as CUDA
# graphs, 600 iterations)).
# DEADLINE_S (unset: none) gives the check that many seconds from its start: a stage still
# running then is stopped (exit 124 in the report), no later stage starts, and the report is
# written with what the stages finished (the benchmark prints and saves each row as it ends).
# Set it a minute under a lease's limit per command.
# The report, OUT/gpu_report.md, holds the device, the versions, the tier's summary, the
# benchmark table and the profile's per-step summary; OUT also keeps the full logs,
# benchmark.json and profile.md (torch.profiler's top operators of each profiled row).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if [ "${1:-}" = "--download" ]; then
    dest=${2:?usage: $0 --download DIR}
    platforms=()
    for tag in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux2010 manylinux1; do
        platforms+=(--platform "${tag}_x86_64")
    done
    grep -vE '^\s*(#|$)' requirements/gpu_wheels.txt | while read -r requirement; do
        "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --implementation cp \
            --python-version "${PYTHON_VERSION:-3.12}" "${platforms[@]}" -d "$dest" \
            "$requirement" || "$PYTHON" -m pip download -q --no-deps -d "$dest" "$requirement"
    done
    ls "$dest"
    exit 0
fi

wheels=${1:-.whl}
out=${2:-gpu_report}
stages=${STAGES-tier bench profile host}
known="tier run bench profile host compiled loop"
for stage in $stages; do
    if [[ " $known " != *" $stage "* ]]; then
        echo "error: STAGES: unknown stage '$stage'; choose from: $known" >&2
        exit 2
    fi
done
if ! "$PYTHON" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    echo "error: $PYTHON: its torch sees no CUDA device: run this on a GPU machine" >&2
    exit 2
fi
if ! compgen -G "$wheels/*.whl" > /dev/null; then
    echo "error: $wheels: no wheels: fetch them with 'bash $0 --download $wheels'" >&2
    exit 2
fi
mkdir -p "$out"
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
    "$wheels"/*.whl
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$PYTHON" - <<'PY'
import importlib, sys
missing = []
for name in ('torch', 'mmengine', 'open_clip', 'faiss', 'decord', 'timm', 'transformers',
             'tokenizers', 'sentencepiece', 'xmr'):
    try:
        importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 - each missing module is named below
        missing.append(f'{name} ({error})')
if missing:
    sys.exit('error: cannot import ' + ', '.join(missing) + ': add their wheels to the wheel '
             'directory (requirements/gpu_wheels.txt lists what a CUDA image usually lacks)')
PY

# The tier's slow tests (a CPU reference run, a CUDA run, a launcher run) overlap when pytest-xdist
# is there; the benchmark and the profile run alone on the device.
parallel=()
if "$PYTHON" -c 'import xdist' 2>/dev/null; then
    parallel=(-n 4)
fi
# A stage's command, stopped at DEADLINE_S; none starts within 10 s of it.
staged() {
    [ -n "${DEADLINE_S:-}" ] || { "$@"; return; }
    local left=$((DEADLINE_S - SECONDS))
    if [ "$left" -le 10 ]; then
        echo "not started: DEADLINE_S=$DEADLINE_S reached: $*" >&2
        return 124
    fi
    timeout --kill-after=10 "$left" "$@"
}
tier=skipped bench=skipped profiled=skipped host=skipped compiled=skipped run=skipped
loop=skipped
compiled_run=test_a_demo_run_compiled_as_cuda_graphs_reaches_the_eager_band
set +e
# In the order STAGES names them: a lease's deadline cuts the last one short.
for stage in $stages; do
    case $stage in
    tier)
        # -v names each test as it starts and as it ends, so a log cut by DEADLINE_S still says
        # which tests ended and which were running; pytest-benchmark, in CUDA images, warns
        # once a worker that it is off under xdist, and no test uses it.
        staged "$PYTHON" -m pytest -m "${TIER_MARK:-gpu}" tests -v -rs -p no:cacheprovider \
            -p no:benchmark --durations=10 "${parallel[@]}" -k "not $compiled_run" 2>&1 \
            | tee "$out/gpu_tier.log"
        tier=${PIPESTATUS[0]} ;;
    run)
        staged "$PYTHON" -m pytest -m gpu tests/gpu/test_runs.py -q -s -rs -p no:cacheprovider \
            -k "$compiled_run" 2>&1 | tee "$out/compiled_run.log"
        run=${PIPESTATUS[0]} ;;
    bench)
        # shellcheck disable=SC2086
        staged "$PYTHON" tools/benchmark.py --device cuda --in-process --out "$out/benchmark.json" \
            ${BENCHMARK_ARGS:-} 2>&1 | tee "$out/benchmark.log"
        bench=${PIPESTATUS[0]} ;;
    profile)
        rm -f "$out/profile.md"
        rows="--methods dasd --cases cross_lingual,eval --amp amp --steps 5 --warmup 3"
        # shellcheck disable=SC2086
        staged "$PYTHON" tools/benchmark.py --device cuda --in-process \
            --profile "$out/profile.md" ${PROFILE_ARGS:-$rows} > "$out/profile.log" 2>&1
        profiled=$? ;;
    host)
        # shellcheck disable=SC2086
        staged "$PYTHON" tools/benchmarks/host_costs.py --device cuda ${HOST_ARGS:-} 2>&1 \
            | tee "$out/host_costs.log"
        host=${PIPESTATUS[0]} ;;
    compiled)
        rows="--methods dasd --cases cross_lingual,cross_modal,video,eval --amp amp"
        rows+=" --steps 10 --warmup 3"
        # shellcheck disable=SC2086
        staged "$PYTHON" tools/benchmark.py --device cuda --in-process --out "$out/compiled.json" \
            ${COMPILE_ARGS:-$rows --compile default,reduce-overhead} 2>&1 | tee "$out/compiled.log"
        compiled=${PIPESTATUS[0]} ;;
    loop)
        # shellcheck disable=SC2086
        staged "$PYTHON" tools/benchmarks/loop_time.py --device cuda --out "$out/loop_time.json" \
            ${LOOP_ARGS:---amp --compile reduce-overhead} 2>&1 | tee "$out/loop_time.log"
        loop=${PIPESTATUS[0]} ;;
    esac
done
set -e

# The benchmark's table and summary, or, from a run stopped before them, its finished rows.
benchmark_rows() {
    if grep -q '^|' "$1"; then
        sed -n '/^|/,$p' "$1"
    else
        grep -E '^(static|dasd) |^    tokens ' "$1" || true
    fi
}

# The tier's tests that began and had not ended where its log stops (a deadline's cut): under
# -v, pytest names a test as it starts (xdist: a line of its own; else the outcome follows on that
# line) and again with its outcome.
unfinished_tests() {
    awk 'match($0, /tests\/[^ ]+::[^ ]+/) {
             test = substr($0, RSTART, RLENGTH)
             if ($0 ~ /(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)/) ended[test] = 1
             else if (!(test in started)) { started[test] = 1; order[++n] = test }
         }
         END { for (i = 1; i <= n; i++) if (!(order[i] in ended)) print "not ended: " order[i] }' \
        "$1"
}

{
    echo "# xmr GPU check"
    echo
    "$PYTHON" -c 'import torch; print(f"- device: {torch.cuda.get_device_name()}"); print(f"- torch {torch.__version__}, CUDA {torch.version.cuda}")'
    # sentencepiece's version decides the vocabulary a config trains at build time.
    "$PYTHON" -c 'from importlib.metadata import version as v; print("- " + ", ".join(f"{n} {v(n)}" for n in ("sentencepiece", "mmengine", "open_clip_torch", "transformers", "timm")))'
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo
    echo "## GPU tier (python -m pytest -m \"${TIER_MARK:-gpu}\" tests): exit $tier"
    echo
    [ "$tier" = skipped ] || { tail -n 15 "$out/gpu_tier.log"
                               unfinished_tests "$out/gpu_tier.log"; } | sed 's/^/    /'
    echo
    echo "## tools/benchmark.py --device cuda ${BENCHMARK_ARGS:-}: exit $bench"
    echo
    [ "$bench" = skipped ] || benchmark_rows "$out/benchmark.log"
    echo
    echo "## profile (profile.md: torch.profiler's top operators per row): exit $profiled"
    echo
    [ "$profiled" = skipped ] || grep -E '^(## |- )' "$out/profile.md" 2>/dev/null \
        || tail -n 5 "$out/profile.log"
    echo
    echo "## the host's costs per trained tensor (tools/benchmarks/host_costs.py): exit $host"
    echo
    [ "$host" = skipped ] || sed -n '/ DASD, /,$p' "$out/host_costs.log"
    echo
    echo "## compiled step (tools/benchmark.py --compile): exit $compiled"
    echo
    [ "$compiled" = skipped ] || benchmark_rows "$out/compiled.log"
    echo
    echo "## a run compiled as CUDA graphs ($compiled_run): exit $run"
    echo
    # A run stopped by DEADLINE_S or failing at collection printed no such line: the report
    # goes on (set -e -o pipefail would end it here).
    [ "$run" = skipped ] || grep -E 'shortened DASD demo|passed|failed|skipped' \
        "$out/compiled_run.log" | sed 's/^/    /' || echo "    (no summary line: exit $run)"
    echo
    echo "## the training loop's iterations (tools/benchmarks/loop_time.py ${LOOP_ARGS:-}): exit $loop"
    echo
    [ "$loop" = skipped ] || sed -n '/ iterations of DASD /,$p' "$out/loop_time.log"
} > "$out/gpu_report.md"
echo "report: $out/gpu_report.md"
for status in "$tier" "$bench" "$profiled" "$host" "$compiled" "$run" "$loop"; do
    [ "$status" = skipped ] || [ "$status" -eq 0 ] || exit 1
done
