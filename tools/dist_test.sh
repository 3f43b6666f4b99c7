#!/usr/bin/env bash
# Distributed evaluation through torchrun and MMEngine's `pytorch` launcher (docs/distributed.md).
#
#   tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCESSES [tools/test.py options...]
#
# Multi-node runs take NNODES, NODE_RANK, MASTER_ADDR and PORT as tools/dist_train.sh does.
set -euo pipefail

if [ $# -lt 3 ]; then
    echo "usage: $0 CONFIG CHECKPOINT NUM_PROCESSES [tools/test.py options...]" >&2
    exit 2
fi
CONFIG=$1
CHECKPOINT=$2
NUM_PROCESSES=$3
shift 3
TOOLS=$(dirname "$0")

PYTHONPATH="$TOOLS/..${PYTHONPATH:+:$PYTHONPATH}" \
exec "${PYTHON:-python}" -m torch.distributed.run \
    --nnodes="${NNODES:-1}" \
    --node_rank="${NODE_RANK:-0}" \
    --master_addr="${MASTER_ADDR:-127.0.0.1}" \
    --master_port="${PORT:-29500}" \
    --nproc_per_node="$NUM_PROCESSES" \
    "$TOOLS/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "$@"
