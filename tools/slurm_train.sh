#!/usr/bin/env bash
# Training on a Slurm cluster through MMEngine's `slurm` launcher (docs/distributed.md).
#
#   [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS=...] \
#       tools/slurm_train.sh PARTITION JOB_NAME CONFIG [tools/train.py options...]
#
# One task per GPU; GPUS > GPUS_PER_NODE spans several nodes (tools/slurm_launch.sh).
set -euo pipefail
source "$(dirname "$0")/slurm_launch.sh"
slurm_launch train.py 'CONFIG' "$@"
