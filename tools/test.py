"""Test a trained model on the test split(s) of its config and print a leaderboard.

``python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE.json] [--cfg-options ...]``
evaluates every test dataset of the config (``MultiDatasetTestLoop`` for several), prints a
Markdown table (one row per model, one column per language plus the mean or sum, like DASD's
Tables 1 and 2) and writes the metrics as ``<checkpoint>_test.json`` and the table as
``<checkpoint>_test.csv`` next to the checkpoint (or at ``--out``).

``--format clip_benchmark`` also writes CLIP_benchmark's JSON, one file per dataset and language,
into ``<result>_clip_benchmark/`` beside the result (docs/evaluation.md).

``python tools/test.py --compare a.json b.json ...`` prints earlier results side by side; with
CONFIG and CHECKPOINT as well, the new result is the last row.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import sys
from datetime import UTC, datetime
from pathlib import Path

from mmengine.config import Config, DictAction


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Test an xmr model and print a leaderboard, or compare earlier results')
    parser.add_argument('config', nargs='?', help='config file')
    parser.add_argument('checkpoint', nargs='?', help='checkpoint file written by training')
    parser.add_argument('--work-dir', help='where the test logs go (default: work_dirs/<config '
                        'name>)')
    parser.add_argument('--out', help='JSON file of the result (the CSV table goes beside it); '
                        'default: <checkpoint>_test.json next to the checkpoint')
    parser.add_argument('--name', help='row label of this model (default: "<config name> '
                        '(<checkpoint name>)")')
    parser.add_argument('--format', choices=['xmr', 'clip_benchmark'], default='xmr',
                        help="clip_benchmark: also write CLIP_benchmark's JSON per dataset and "
                        'language into <result>_clip_benchmark/')
    parser.add_argument('--compare', nargs='+', metavar='JSON',
                        help='result files of earlier runs to show side by side')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config keys, e.g. test_dataloader.batch_size=64')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher for distributed testing')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if (args.config is None) != (args.checkpoint is None):
        parser.error('give both CONFIG and CHECKPOINT (or only --compare)')
    if args.config is None and not args.compare:
        parser.error('give CONFIG and CHECKPOINT to test, or --compare JSON ...')
    if args.config is None and (args.out or args.work_dir or args.cfg_options or args.name):
        parser.error('--out, --work-dir, --name and --cfg-options need CONFIG and CHECKPOINT')
    if args.config is None and args.format != 'xmr':
        parser.error('--format clip_benchmark needs CONFIG and CHECKPOINT')
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def build_config(args: argparse.Namespace) -> Config:
    from xmr.engine.work_dir import resolve_work_dir

    if not osp.isfile(args.config):
        raise SystemExit(f'error: config file {args.config} does not exist')
    if not osp.isfile(args.checkpoint):
        raise SystemExit(f'error: checkpoint {args.checkpoint} does not exist')
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    missing = [key for key in ('test_dataloader', 'test_evaluator', 'test_cfg')
               if cfg.get(key) is None]
    if missing:
        raise SystemExit(f'error: config {args.config} has no {", ".join(missing)}; a test run '
                         'needs the test split(s), their metrics and the test loop')
    cfg.launcher = args.launcher
    resolve_work_dir(cfg, args.config, args.work_dir)
    # The checkpoint is loaded strictly below; the runner must neither load nor resume.
    cfg.load_from, cfg.resume = None, False
    return cfg


def output_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """The result JSON and the table CSV."""
    if args.out is not None:
        json_path = Path(args.out)
    else:
        checkpoint = Path(args.checkpoint)
        json_path = checkpoint.with_name(f'{checkpoint.stem}_test.json')
    return json_path, json_path.with_suffix('.csv')


def check_test_languages(runner, model) -> None:
    """Stop before any encoding when a test set has captions in a language the model lacks."""
    from xmr.apis import check_languages

    loop = runner.test_loop
    loaders = getattr(loop, 'dataloaders', None) or [loop.dataloader]
    for loader in loaders:
        metainfo = getattr(loader.dataset, 'metainfo', None) or {}
        if 'languages' in metainfo:
            where = f"test dataset {metainfo.get('dataset', type(loader.dataset).__name__)}"
            if metainfo.get('ann_file'):
                where += f" ({metainfo['ann_file']})"
            check_languages(model, metainfo['languages'], where=where)


def run_test(args: argparse.Namespace):
    """Test the checkpoint; return its :class:`~xmr.evaluation.EvaluationResult` and metrics.

    The second value lists the test metrics with their datasets
    (:func:`~xmr.evaluation.scored_datasets`); with ``--format clip_benchmark`` they must include
    one CLIP_benchmark can be compared with, checked before any encoding.
    """
    from mmengine.model import is_model_wrapper
    from mmengine.runner import Runner

    from xmr.apis import CheckpointMismatchError, load_trained_checkpoint
    from xmr.engine.distributed import setup_cpu_distributed
    from xmr.evaluation import EvaluationResult, clip_benchmark_records, scored_datasets

    cfg = build_config(args)
    setup_cpu_distributed(cfg, args.launcher)
    runner = Runner.from_cfg(cfg)
    model = runner.model.module if is_model_wrapper(runner.model) else runner.model
    try:
        meta = load_trained_checkpoint(model, args.checkpoint)
        check_test_languages(runner, model)
        scored = scored_datasets(runner.test_loop)
        if args.format == 'clip_benchmark':
            clip_benchmark_records({}, scored, '', '')
    except (CheckpointMismatchError, ValueError) as error:
        raise SystemExit(f'error: {error}') from error
    metrics = runner.test()
    name = args.name or (f'{osp.splitext(osp.basename(args.config))[0]} '
                         f'({Path(args.checkpoint).stem})')
    extra = {'tested_at': datetime.now(UTC).isoformat(timespec='seconds'),
             'command': ' '.join(['tools/test.py', *sys.argv[1:]])}
    if 'iter' in meta:
        extra['iter'] = int(meta['iter'])
    return EvaluationResult(name=name, metrics=dict(metrics), config=str(args.config),
                            checkpoint=str(args.checkpoint), extra=extra), scored


def write_clip_benchmark_files(args: argparse.Namespace, result, scored, json_path: Path) -> Path:
    """CLIP_benchmark's files of ``result`` in ``<result>_clip_benchmark/``; return the folder.

    ``model`` is ``--name`` or the config's name, ``pretrained`` the checkpoint.
    """
    from xmr.evaluation import clip_benchmark_records, write_clip_benchmark

    model = args.name or osp.splitext(osp.basename(args.config))[0]
    folder = json_path.with_name(f'{json_path.stem}_clip_benchmark')
    write_clip_benchmark(clip_benchmark_records(result.metrics, scored, model,
                                                str(args.checkpoint)), folder)
    return folder


def main(argv: list[str] | None = None) -> None:
    from mmengine.dist import is_main_process

    import xmr  # noqa: F401  (registers every module)
    from xmr.evaluation import leaderboard_markdown, load_result, save_result, write_csv

    args = parse_args(argv)
    results = []
    for path in args.compare or []:
        try:
            results.append(load_result(path))
        except (FileNotFoundError, ValueError) as error:
            raise SystemExit(f'error: {error}') from error
    if args.config is not None:
        result, scored = run_test(args)
        if not is_main_process():
            return
        json_path, csv_path = output_paths(args)
        save_result(json_path, result)
        write_csv(csv_path, [result])
        if args.format == 'clip_benchmark':
            print(f'clip_benchmark: {write_clip_benchmark_files(args, result, scored, json_path)}')
        results.append(result)
    try:
        table = leaderboard_markdown(results)
    except ValueError as error:
        raise SystemExit(f'error: {error}') from error
    print(table)
    if args.config is not None:
        print(f'\nresults: {json_path}\ntable:   {csv_path}')


if __name__ == '__main__':
    sys.exit(main())
