"""Train a model from a config: ``python tools/train.py CONFIG [--work-dir DIR] [--resume]``."""
from __future__ import annotations

import argparse
import os
import os.path as osp

from mmengine.config import Config, DictAction
from mmengine.runner import Runner

from xmr.utils.cli import UserError, run_tool


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Train an xmr model')
    parser.add_argument('config', help='config file')
    parser.add_argument('--work-dir', help='where logs and checkpoints go '
                        '(default: work_dirs/<config name>)')
    parser.add_argument('--resume', nargs='?', type=str, const='auto',
                        help="resume from a checkpoint path, or 'auto' (the default when the "
                        'flag has no value): the latest checkpoint in the work dir')
    parser.add_argument('--amp', action='store_true',
                        help='mixed precision: bf16 where supported, fp16 + loss scaling on '
                        'older GPUs; for GPUs: on a CPU it is slower than fp32 (the log names '
                        'the autocast dtype)')
    parser.add_argument('--amp-dtype', choices=['bfloat16', 'float16'],
                        help='force the autocast precision of --amp (implies --amp); float16 '
                        'comes with loss scaling')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config keys, e.g. model.language_branch.num_blocks=6')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher for distributed training')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def build_config(args: argparse.Namespace) -> Config:
    from xmr.engine.amp import enable_amp
    from xmr.engine.work_dir import resolve_work_dir

    if not osp.isfile(args.config):
        raise UserError(args.config, 'config file does not exist',
                        'give the path of a config under configs/')
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    cfg.launcher = args.launcher
    resolve_work_dir(cfg, args.config, args.work_dir)
    if args.amp or args.amp_dtype:
        enable_amp(cfg, args.amp_dtype)
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume is not None:
        if not osp.isfile(args.resume):
            raise UserError(args.resume, '--resume checkpoint does not exist',
                            'give an existing .pth, or --resume alone for the latest one')
        cfg.resume, cfg.load_from = True, args.resume
    return cfg


def main(argv: list[str] | None = None) -> None:
    import xmr  # noqa: F401  (registers every module)
    from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
    from xmr.engine.distributed import setup_cpu_distributed
    from xmr.engine.threads import set_cpu_threads

    allow_mmengine_checkpoint_types()
    args = parse_args(argv)
    cfg = build_config(args)
    set_cpu_threads(cfg)
    setup_cpu_distributed(cfg, args.launcher)
    runner = Runner.from_cfg(cfg)
    runner.train()


if __name__ == '__main__':
    run_tool(main)
