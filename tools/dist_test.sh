#!/usr/bin/env bash
# Distributed evaluation through torchrun and MMEngine's `pytorch` launcher (docs/distributed.md).
#
#   tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCESSES [tools/test.py options...]
#
# Multi-node runs take NNODES, NODE_RANK, MASTER_ADDR and PORT as tools/dist_train.sh does.
set -euo pipefail
source "$(dirname "$0")/dist_launch.sh"
dist_launch test.py 'CONFIG CHECKPOINT' "$@"
