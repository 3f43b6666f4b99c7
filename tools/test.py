"""Test a trained model on the test split(s) of its config and print a leaderboard.

``python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE.json] [--overwrite] ...``
evaluates every test dataset of the config (``MultiDatasetTestLoop`` for several), prints a
Markdown table (one row per model, one column per language plus the mean or sum, like DASD's
Tables 1 and 2) and writes the metrics as ``<checkpoint>_test.json`` and the table as
``<checkpoint>_test.csv`` next to the checkpoint (or at ``--out``, a ``.json`` path). Only an
earlier test result there is replaced, and only with ``--overwrite``; any other file is refused
before testing. How the model's tokenizers read each test set's captions (those its text
context cuts, the tokens its vocabulary lacks) is counted per language before testing, recorded
with the set (``caption_token_counts``) and named below the table where any is.

``--format clip_benchmark`` also writes CLIP_benchmark's JSON, one file per dataset and language,
into ``<result>_clip_benchmark/`` beside the result (docs/evaluation.md).

``python tools/test.py --compare a.json b.json ...`` prints earlier results side by side; with
CONFIG and CHECKPOINT as well, the new result is the last row; ``--over-seeds`` makes the seeds
of one run one row of ``mean ± std``.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import shlex
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mmengine.config import Config

from xmr.run_config import (
    add_config_arguments,
    add_launcher_arguments,
    check_annotation_files,
    check_cached_galleries,
    config_file,
    load_run_config,
)
from xmr.utils.cli import (
    GatherAction,
    UserError,
    argument_text,
    as_typed,
    given_folder,
    given_output,
    print_for_reader,
    run_tool,
)
from xmr.version import provenance

if TYPE_CHECKING:
    from xmr.evaluation.leaderboard import EvaluationResult


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Test an xmr model and print a leaderboard, or compare earlier results')
    parser.add_argument('config', nargs='?', help='config file')
    parser.add_argument('checkpoint', nargs='?', help='checkpoint file written by training')
    parser.add_argument('--work-dir', help='where the test logs go (default: test/ beside the '
                        'result: beside the checkpoint, in the training work dir, without --out; '
                        "the training run's config dump and logs stay as they were; a "
                        "training run's work dir, holding its dump, is refused)")
    parser.add_argument('--out', help='JSON file of the result (the CSV table goes beside it); '
                        'default: <checkpoint>_test.json next to the checkpoint')
    parser.add_argument('--overwrite', action='store_true',
                        help='replace an earlier test result (its JSON, CSV and CLIP_benchmark '
                        'files) where this one goes; without it an existing result is kept and '
                        'the test is refused. Files other than test results are never replaced')
    parser.add_argument('--name', help='row label of this model (default: "<config name>'
                        '[_<ablation>...] (<checkpoint name>[, seed N])", the seed the '
                        'checkpoint was trained with)')
    parser.add_argument('--format', choices=['xmr', 'clip_benchmark'], default='xmr',
                        help="clip_benchmark: also write CLIP_benchmark's JSON per dataset and "
                        'language into <result>_clip_benchmark/')
    parser.add_argument('--compare', nargs='+', action=GatherAction, metavar='JSON',
                        help='result files of earlier runs to show side by side (printed; '
                        "the CSV written for CHECKPOINT holds its own row alone)")
    # xmr.evaluation.leaderboard's LAYOUTS and WIDE_COLUMNS_AT_MOST, written out: --help
    # answers without loading torch.
    parser.add_argument('--layout', choices=('auto', 'wide', 'long'), default='auto',
                        help="wide: a row per model and a column per language (the papers' "
                        'tables); long: a row per language and a column per model; auto '
                        '(default): long beyond 24 columns of values (Crossmodal-3600, '
                        'XTD200), else wide. The CSV is wide whatever is printed')
    parser.add_argument('--over-seeds', action='store_true',
                        help='with --compare: one row per run whose seeds alone differ (same '
                        'config file, --ablation rows, checkpoint name and test sets), each '
                        'value the mean ± sample standard deviation over its seeds')
    add_config_arguments(parser, 'test_dataloader.batch_size=64',
                         named_by='the default row label (--name)')
    add_launcher_arguments(parser, 'testing')
    args = parser.parse_args(argv)
    if (args.config is None) != (args.checkpoint is None):
        parser.error('give both CONFIG and CHECKPOINT (or only --compare)')
    if args.config is None and not args.compare:
        parser.error('give CONFIG and CHECKPOINT to test, or --compare JSON ...')
    if args.config is None and (args.out or args.work_dir or args.cfg_options or args.name
                                or args.ablation or args.overwrite):
        parser.error('--out, --overwrite, --work-dir, --name, --ablation and --cfg-options need '
                     'CONFIG and CHECKPOINT')
    if args.over_seeds and not args.compare:
        parser.error('--over-seeds averages the results of --compare JSON ...: give them')
    if args.config is None and args.format != 'xmr':
        parser.error('--format clip_benchmark needs CONFIG and CHECKPOINT')
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    # The arguments given, which main(argv) from Python takes in place of sys.argv, quoted so
    # that the recorded command runs again as it is: `xmr test` where the xmr command runs the
    # tools (`xmr train --test` too), an installed copy having no tools/ folder.
    tool = as_typed(typed_tool_path()).split()
    args.command = shlex.join([*tool, *(sys.argv[1:] if argv is None else argv)])
    return args


def typed_tool_path() -> str:
    """This tool's path as the command line that runs it named it or its sibling
    (``/abs/xmr/tools/train.py --test`` from another folder: ``/abs/xmr/tools/test.py``, which
    runs there, where ``tools/test.py`` does not); ``tools/test.py`` when it was not run so
    (``main(argv)`` from Python)."""
    sibling = Path(sys.argv[0]).with_name(Path(__file__).name)
    if Path(sys.argv[0]).suffix == '.py' and sibling.is_file() and sibling.samefile(__file__):
        return str(sibling)
    return 'tools/test.py'


def check_inputs(args: argparse.Namespace) -> None:
    """The config and the checkpoint exist, and the checkpoint is a whole one: checked first,
    so that a mistyped path is named as such, not as the earlier result beside the checkpoint
    it would be tested into, and a damaged checkpoint before the runner is built.

    Raises:
        UserError: no such config; a checkpoint missing, a folder or unreadable; naming it.
        CheckpointReadError: an empty, foreign, truncated or damaged checkpoint.
    """
    from xmr.engine.checkpoint import check_given_checkpoint

    config_file(args.config)
    check_given_checkpoint(args.checkpoint, 'CHECKPOINT')


def build_config(args: argparse.Namespace) -> Config:
    """The test run's config, checked before anything is written, as the place of the result
    and of the test logs are.

    Raises:
        UserError: the config has no test split, metric or loop (a training part, a
            ``_base_`` file), naming the keys.
    """
    # MMEngine dumps the config into its work dir: the training run's dump (beside its
    # checkpoints, whatever --work-dir it trained with) must not be replaced by the test's.
    # Beside the result (the checkpoint's folder, without --out), whose place is checked first:
    # the logs' folder is the result's, so what is wrong there is named as the result's.
    check_writable(output_paths(args)[0], args.overwrite, _result_given_by(args))
    work_dir = args.work_dir or str(output_paths(args)[0].absolute().parent / 'test')
    given_folder(work_dir, '--work-dir' if args.work_dir else 'the test logs beside the result',
                 'give a folder for the test logs (made if absent)'
                 + ('' if args.work_dir else ' with --work-dir'))
    cfg = load_run_config(args.config, ablations=args.ablation, cfg_options=args.cfg_options,
                          work_dir=work_dir)
    missing = [key for key in ('test_dataloader', 'test_evaluator', 'test_cfg')
               if cfg.get(key) is None]
    if missing:
        raise UserError(args.config, f'has no {", ".join(missing)}: a test run needs the test '
                        'split(s), their metrics and the test loop', 'give a config that tests '
                        'a model (configs/<method>/*.py), not a _base_ part')
    check_cached_galleries(cfg, 'test')
    cfg.launcher = args.launcher
    # The checkpoint is loaded strictly below; the runner must neither load nor resume.
    cfg.load_from, cfg.resume = None, False
    return cfg


def _result_given_by(args: argparse.Namespace) -> str:
    """Where the result's path comes from, as its errors name it."""
    return '--out' if args.out is not None else 'the default, beside CHECKPOINT'


def output_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """The result JSON and the table CSV."""
    if args.out is not None:
        json_path = Path(args.out)
    else:
        checkpoint = Path(args.checkpoint)
        json_path = checkpoint.with_name(f'{checkpoint.stem}_test.json')
    return json_path, json_path.with_suffix('.csv')


def path_not_taken_meanwhile(json_path: Path, taken_before: bool, overwrite: bool) -> Path:
    """``json_path``, or, where another test wrote a result there while this one ran (two
    tests of one checkpoint at once) and ``overwrite`` was not given, a sibling named by the
    time: the result checked free as the test began is not replaced, nor this one lost.

    Args:
        json_path: where the result goes; its CSV beside it.
        taken_before: whether a result stood there as the test began (``overwrite`` then).
        overwrite: whether an earlier test result there may be replaced.
    """
    if overwrite or taken_before or not _result_files_exist(json_path):
        return json_path
    moved = json_path.with_name(f"{json_path.stem}_{datetime.now():%Y%m%d_%H%M%S}.json")
    print(f'warning: {json_path}: another test wrote its result there while this one ran; this '
          f'result goes to {moved}', file=sys.stderr)
    return moved


def _result_files_exist(json_path: Path) -> bool:
    return json_path.exists() or json_path.with_suffix('.csv').exists()


def check_writable(json_path: Path, overwrite: bool, given_by: str = '--out') -> None:
    """Stop before testing when the result cannot be written where it goes.

    Args:
        json_path: the result JSON; its CSV goes beside it.
        overwrite: whether an earlier test result there may be replaced.
        given_by: what named ``json_path``, for the message (``'--out'``, or the default
            beside the checkpoint).

    Raises:
        UserError: ``json_path`` does not end in ``.json``, a folder or a file other than an
            earlier result (a checkpoint, a phase report) stands where a result goes, an earlier
            result does without ``overwrite``, or the folder is not writable.
    """
    for path in (json_path, json_path.with_suffix('.csv')):
        if path.is_dir():
            raise UserError(path, 'is a folder, where the result file goes',
                            'give --out the path of a .json file (its .csv goes beside it)')
    if json_path.suffix != '.json':
        raise UserError(json_path, 'the result is written as JSON, and its table beside it as '
                        '.csv', 'give --out a path ending in .json')
    if _result_files_exist(json_path):
        check_earlier_result(json_path, overwrite)
    check_earlier_clip_benchmark_files(json_path, overwrite)
    given_output(json_path, given_by, 'give a writable --out')


def check_earlier_result(json_path: Path, overwrite: bool) -> None:
    """Refuse to replace the files at ``json_path`` unless they are an earlier test result
    (its JSON and CSV) and ``overwrite`` is given.

    A result and its table are replaced together, so a JSON whose CSV is some other file is
    refused as well, as is a CSV alone unless it is a result's table (a test killed as it
    saved, between the table and the JSON) and ``overwrite`` is given.
    """
    from xmr.evaluation import load_result

    csv_path = json_path.with_suffix('.csv')
    keep = 'give --out another .json path'
    try:
        earlier = load_result(json_path)
    except FileNotFoundError:
        if not _is_result_table(csv_path):
            raise UserError(csv_path, f'exists, and no test result {json_path.name} stands '
                            'beside it; it is left as it is', keep) from None
        if not overwrite:
            raise UserError(csv_path, f'holds the table of a test result without its '
                            f'{json_path.name} (a test stopped as it saved); it is kept',
                            f'pass --overwrite to replace it, or {keep}') from None
        return
    except ValueError as error:
        raise UserError(json_path, f'exists and is not an earlier test result ({error}); it is '
                        'left as it is', keep) from error
    if csv_path.exists() and not _is_result_table(csv_path):
        raise UserError(csv_path, 'exists and is not the table of a test result; it is left as '
                        'it is', keep)
    if not overwrite:
        raise UserError(json_path, 'holds an earlier test result (tested '
                        f"{earlier.extra.get('tested_at', 'at an unrecorded time')}, "
                        f'{earlier.checkpoint_resolved or earlier.checkpoint}); it is kept',
                        f'pass --overwrite to replace it, or {keep}')


def check_work_dir(args: argparse.Namespace) -> None:
    """Stop before testing when ``--work-dir`` is a training run's, holding its config dump:
    MMEngine dumps the test's config to ``<work dir>/<config name>.py``, over the training's.

    Raises:
        UserError: naming the folder, its checkpoints and the dump, and the ways out.
    """
    from xmr.engine.work_dir import training_checkpoints

    if args.work_dir is None:
        return
    dump = Path(args.work_dir) / Path(config_file(args.config)).name
    found = training_checkpoints(args.work_dir)
    if not found and (Path(args.work_dir) / 'last_checkpoint').is_file():
        found = ['last_checkpoint']  # a run whose checkpoint hook saves to its out_dir
    if found and dump.is_file():
        shown = ', '.join(found[:3]) + (', ...' if len(found) > 3 else '')
        raise UserError(args.work_dir, f'is the work dir of a training run ({shown}), whose '
                        f'config dump {dump.name} the test would replace with its own',
                        'leave out --work-dir (the test logs go to test/ beside the result), or '
                        'give a folder of its own')


def clip_benchmark_folder(json_path: Path) -> Path:
    """Where ``--format clip_benchmark`` writes: ``<result>_clip_benchmark/`` beside it."""
    return json_path.with_name(f'{json_path.stem}_clip_benchmark')


def check_earlier_clip_benchmark_files(json_path: Path, overwrite: bool) -> None:
    """Refuse, unless ``overwrite``, when the result's CLIP_benchmark folder holds an earlier
    export (its result JSON removed, else :func:`check_earlier_result` refused already)."""
    from xmr.evaluation import clip_benchmark_files

    folder = clip_benchmark_folder(json_path)
    if not overwrite and clip_benchmark_files(folder):
        raise UserError(folder, 'holds the CLIP_benchmark files of an earlier test result; they '
                        'are kept', 'pass --overwrite to replace them, or give --out another '
                        '.json path')


def remove_earlier_clip_benchmark_files(json_path: Path, keep: Iterable[Path] = ()) -> None:
    """The replaced result's CLIP_benchmark files go with it: left there, they would stand
    beside the new result with the numbers it replaced (of a language no longer tested, say).
    The new result's own files (``keep``) and other files in the folder stay."""
    from xmr.evaluation import clip_benchmark_files

    folder = clip_benchmark_folder(json_path)
    for path in set(clip_benchmark_files(folder)) - set(keep):
        path.unlink()
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def _is_result_table(csv_path: Path) -> bool:
    """Whether ``csv_path`` starts with the header :func:`~xmr.evaluation.write_csv` writes."""
    with open(csv_path, 'rb') as handle:
        header = handle.readline(4096).rstrip(b'\r\n')
    return header.split(b',')[0] == b'model'


def summary_languages(runner) -> dict[str, list[str]]:
    """Per metric prefix, the languages its summaries (``mAR``, the sums) are over, as each
    retrieval metric recorded them while scoring (the source language is reported, not
    averaged); the leaderboard's legend names them."""
    from xmr.engine.eval_loops import scored_loaders

    return {metric.prefix or '': list(metric.summarised_languages)
            for _, evaluator in scored_loaders(runner.test_loop) for metric in evaluator.metrics
            if getattr(metric, 'summarised_languages', None)}


def check_test_languages(runner, model) -> None:
    """Stop before any encoding when a test set has captions in a language the model lacks,
    lacks the texts it queries with, has media of another size than its image tower takes, or
    another media count than its metric's protocol is defined on (COCO 5K on a 1K file)."""
    from xmr.apis import check_languages
    from xmr.engine.data_languages import check_gallery_sizes, check_media_sizes
    from xmr.engine.eval_loops import scored_loaders

    for loader, _ in scored_loaders(runner.test_loop):
        metainfo = getattr(loader.dataset, 'metainfo', None) or {}
        where = f"test dataset {metainfo.get('dataset', type(loader.dataset).__name__)}"
        if metainfo.get('ann_file'):
            where += f" ({metainfo['ann_file']})"
        if 'languages' in metainfo:
            check_languages(model, metainfo['languages'], where=where)
            # Translate-test and routine 3 query with the captions' back-translations.
            check_gallery = getattr(model, 'check_gallery', None)
            if check_gallery is not None:
                check_gallery(metainfo, where)
        check_media_sizes(model, {where: loader.dataset})
    check_gallery_sizes(runner.test_loop, 'test')


def run_test(args: argparse.Namespace, cfg: Config):
    """Test the checkpoint with ``cfg``; return its :class:`~xmr.evaluation.EvaluationResult`
    and metrics.

    Its inputs and ``cfg`` are checked first, the process set up (:func:`main`). The second
    value lists the test metrics with their datasets (:func:`~xmr.evaluation.scored_datasets`);
    with ``--format clip_benchmark`` they must include one CLIP_benchmark can be compared with,
    checked before any encoding.
    """
    from xmr.apis import CheckpointMismatchError, load_trained_checkpoint
    from xmr.datasets.held_out import check_test_held_out
    from xmr.engine.eval_loops import scored_loaders
    from xmr.engine.runner import ResumeCheckedRunner, runner_name_in_process
    from xmr.engine.wrappers import unwrap_model
    from xmr.evaluation import (
        EvaluationResult,
        comparable_entries,
        evaluated_sets,
        plain_metrics,
        scored_datasets,
    )
    from xmr.models.language.carried_vocabulary import read_vocabulary_from

    # A name of its own: a test in the process of its training (`tools/train.py --test`)
    # that began in the second the training's runner did would log into the training's files.
    cfg.experiment_name = runner_name_in_process(
        f"{cfg.get('experiment_name') or Path(args.config).stem}_test")
    read_vocabulary_from(cfg.model, args.checkpoint)
    # Its config dump never replaces the config it read (--work-dir naming the config's folder).
    runner = ResumeCheckedRunner.from_cfg(cfg)
    model = unwrap_model(runner.model)
    try:
        meta = load_trained_checkpoint(model, args.checkpoint)
        check_test_languages(runner, model)
        # After the checkpoint and languages, cheaper to refuse: a training set is read whole.
        check_test_held_out(cfg, [loader.dataset
                                  for loader, _ in scored_loaders(runner.test_loop)])
        scored = scored_datasets(runner.test_loop)
        if args.format == 'clip_benchmark':
            comparable_entries(scored)
    except (CheckpointMismatchError, ValueError) as error:
        raise SystemExit(f'error: {error}') from error
    # Counted before testing: a count that failed after it would lose the test's result.
    tested_sets = evaluated_sets(runner.test_loop, model, 'test')
    metrics = runner.test()
    seed = meta.get('seed')
    extra = {'tested_at': datetime.now(UTC).isoformat(timespec='seconds'),
             'command': argument_text(args.command),
             'ablations': [argument_text(str(name)) for name in args.ablation],
             'seed': None if seed is None else int(seed), **provenance()}
    if 'iter' in meta:
        extra['iter'] = int(meta['iter'])
    extra['summary_languages'] = summary_languages(runner)
    extra['rankings'] = {entry.prefix: entry.ranking for entry in scored
                         if entry.ranking != 'exact'}
    return EvaluationResult(name=argument_text(args.name or default_name(args, extra['seed'])),
                            metrics=plain_metrics(metrics),
                            config=argument_text(str(args.config)),
                            checkpoint=argument_text(str(args.checkpoint)),
                            test_sets=tested_sets,
                            extra=extra, config_resolved=resolved(config_file(args.config)),
                            checkpoint_resolved=resolved(args.checkpoint)), scored


def resolved(path: str | os.PathLike) -> str:
    """``path`` absolute, symbolic links resolved, as text (:func:`argument_text`): a result
    read from another folder still names the file, where the path as given was relative to the
    folder ``tools/test.py`` ran in."""
    return argument_text(str(Path(path).resolve()))


def default_name(args: argparse.Namespace, seed: int | None) -> str:
    """``<config name>[_<ablation>...] (<checkpoint name>[, seed N])``: the runs of one config
    with other ``--ablation`` rows or seeds, whose checkpoints share their names
    (``iter_3000``), get rows of their own in ``--compare``. The seed is the one the checkpoint
    was trained with."""
    trained = Path(args.checkpoint).stem + ('' if seed is None else f', seed {seed}')
    return f'{config_name(args)} ({trained})'


def config_name(args: argparse.Namespace) -> str:
    """``<config name>[_<ablation>...]``, the ablation names as the default work dir adds them."""
    from xmr.ablations import ablation_suffix

    return osp.splitext(osp.basename(args.config))[0] + ablation_suffix(args.ablation)


def clip_benchmark_texts(args: argparse.Namespace, result, scored, json_path: Path
                         ) -> dict[Path, str]:
    """CLIP_benchmark's files of ``result`` in ``<result>_clip_benchmark/`` and their texts.

    ``model`` is ``--name`` or the config's name with its ``--ablation`` rows (as the default
    row label and work dir name them), ``pretrained`` the checkpoint.
    """
    from xmr.evaluation import clip_benchmark_records
    from xmr.evaluation import clip_benchmark_texts as texts

    model = argument_text(args.name or config_name(args))
    return texts(clip_benchmark_records(result.metrics, scored, model,
                                        argument_text(str(args.checkpoint))),
                 clip_benchmark_folder(json_path))


def shown_rows(args: argparse.Namespace, results: list[EvaluationResult]
               ) -> list[EvaluationResult]:
    """The table's rows: ``results``, or with ``--over-seeds`` one per run over its seeds.

    Raises:
        ValueError: results ``--over-seeds`` cannot average (a seed missing or given twice).
    """
    from xmr.evaluation.leaderboard import mean_over_seeds

    return mean_over_seeds(results) if args.over_seeds else results


def refuse_compared_checkpoint(path: str) -> None:
    """Refuse a checkpoint given to ``--compare`` in place of its result, naming the result
    (read as JSON, the file was said to be no UTF-8, to be saved as UTF-8).

    Raises:
        UserError: naming the checkpoint, its result's path and the command that tests it.
    """
    if not os.path.isfile(path):
        return  # load_result names it
    from xmr.engine.checkpoint import torch_save_head

    if torch_save_head(path) is not None:
        result = output_paths(argparse.Namespace(out=None, checkpoint=path))[0]
        raise UserError(f'{path} (--compare)', 'is a checkpoint, not a test result', 'give its '
                        f'result ({result}, which tools/test.py CONFIG {path} writes) or '
                        'another result JSON')


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)  # first: --help answers without loading torch
    from xmr.engine.runner import runner_instances_released

    with runner_instances_released():  # a main called again from Python: its own log
        _test_or_compare(args)


def _test_or_compare(args: argparse.Namespace) -> None:
    from mmengine.dist import is_main_process

    from xmr.engine.process import prepare_process
    from xmr.evaluation import leaderboard_markdown, load_result, save_result_files

    results = []
    for path in args.compare or []:
        refuse_compared_checkpoint(path)
        try:
            results.append(load_result(path))
        except (FileNotFoundError, ValueError) as error:
            raise SystemExit(f'error: {error}') from error
    if args.config is None:
        try:
            rows = shown_rows(args, results)
        except ValueError as error:
            raise SystemExit(f'error: {error}') from error
        print_for_reader(leaderboard_markdown(rows, args.layout))
        return
    check_inputs(args)
    cfg = build_config(args)
    check_annotation_files(cfg, ['test'])
    prepare_process(cfg, args.launcher)
    json_path, csv_path = output_paths(args)
    taken_before = _result_files_exist(json_path)
    check_work_dir(args)
    result, scored = run_test(args, cfg)
    if not is_main_process():
        return
    json_path = path_not_taken_meanwhile(json_path, taken_before, args.overwrite)
    csv_path = json_path.with_suffix('.csv')
    # The table is printed before anything is written, so a failing write never hides it;
    # a result the table cannot show is written all the same, then named. A reader of stdout
    # that quit (`| head`) stops neither: the test's result is written whoever reads.
    try:
        print_for_reader(leaderboard_markdown(shown_rows(args, [*results, result]),
                                              args.layout))
        unshown = None
    except ValueError as error:
        unshown = error
    export = (clip_benchmark_texts(args, result, scored, json_path)
              if args.format == 'clip_benchmark' else {})
    save_result_files(json_path, result, export)
    remove_earlier_clip_benchmark_files(json_path, keep=export)
    if export:
        print_for_reader(f'clip_benchmark: {clip_benchmark_folder(json_path)}')
    print_for_reader(f'\nresults: {json_path}\ntable:   {csv_path}')
    if unshown is not None:
        raise SystemExit(f'error: {unshown}; the result is saved: {json_path}')


if __name__ == '__main__':
    run_tool(main)
