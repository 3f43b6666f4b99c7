#!/usr/bin/env bash
# Evaluation on a Slurm cluster through MMEngine's `slurm` launcher (docs/distributed.md).
#
#   [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS=...] \
#       tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [tools/test.py options...]
set -euo pipefail

if [ $# -lt 4 ]; then
    echo "usage: $0 PARTITION JOB_NAME CONFIG CHECKPOINT [tools/test.py options...]" >&2
    exit 2
fi
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
CHECKPOINT=$4
shift 4
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-$(( GPUS < 8 ? GPUS : 8 ))}
TOOLS=$(dirname "$0")
read -r -a EXTRA_SRUN_ARGS <<< "${SRUN_ARGS:-}"

PYTHONPATH="$TOOLS/..${PYTHONPATH:+:$PYTHONPATH}" \
exec "${SRUN:-srun}" -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" \
    --ntasks="$GPUS" \
    --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="${CPUS_PER_TASK:-5}" \
    --kill-on-bad-exit=1 \
    "${EXTRA_SRUN_ARGS[@]}" \
    "${PYTHON:-python}" -u "$TOOLS/test.py" "$CONFIG" "$CHECKPOINT" --launcher slurm "$@"
