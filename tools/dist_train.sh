#!/usr/bin/env bash
# Distributed training through torchrun and MMEngine's `pytorch` launcher (docs/distributed.md).
#
#   tools/dist_train.sh CONFIG NUM_PROCESSES [tools/train.py options...]
#
# One node:   tools/dist_train.sh configs/demo/static_tiny-clip_synthetic.py 4 --amp
# Two nodes:  NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 tools/dist_train.sh CONFIG 8   (on node0)
#             NNODES=2 NODE_RANK=1 MASTER_ADDR=node0 tools/dist_train.sh CONFIG 8   (on node1)
# Without CUDA the processes train on CPU over gloo. train_dataloader.batch_size is per
# process: keep NUM_PROCESSES x batch_size at the configured global batch (DASD: 128).
set -euo pipefail
source "$(dirname "$0")/dist_launch.sh"
dist_launch train.py 'CONFIG' "$@"
