#!/usr/bin/env bash
# Evaluation on a Slurm cluster through MMEngine's `slurm` launcher (docs/distributed.md).
#
#   [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS=...] \
#       tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [tools/test.py options...]
set -euo pipefail
source "$(dirname "$0")/slurm_launch.sh"
slurm_launch test.py 'CONFIG CHECKPOINT' "$@"
