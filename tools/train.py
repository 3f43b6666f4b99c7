"""Train a model from a config: ``python tools/train.py CONFIG [--work-dir DIR] [--resume [WHAT]]``.

``--resume`` (or ``--resume latest``) continues from the work dir's latest checkpoint (the one
``last_checkpoint`` names, else the newest ``iter_<n>.pth``) and fails when there is none;
``--resume auto`` does the same but starts a new run when there is none (for jobs that a
scheduler restarts), whose own first best of each key replaces the ``best_*.pth`` of a start
stopped before its first periodic checkpoint; ``--resume PATH`` continues from that checkpoint.
A new run without ``--resume`` refuses a work dir holding ``iter_*.pth`` or ``best_*.pth``: it
would overwrite some of them and leave the rest beside its own; ``--resume PATH`` refuses one
holding checkpoints past its iteration alike.

``--test`` (or ``--test last``) tests the final weights once training has ended, as
``tools/test.py CONFIG <work_dir>/iter_<n>.pth`` would, in the same process: the leaderboard is
printed and the result written as ``iter_<n>_test.json`` (and ``.csv``) beside the checkpoint;
``--test best`` tests the best validation's checkpoint (``CheckpointHook``'s ``save_best``).
The test split, the checkpoint saved for it, and its galleries held out of the training data
(unless ``train_cfg.allow_eval_overlap``) are checked before training.
A result of that very test already beside the checkpoint (the same command, written after the
checkpoint: a job requeued with ``--resume auto --test`` after it ended) is shown again, not
computed again; any other file there is kept and the test refused, naming the command to run.
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

from mmengine.config import Config

from xmr.run_config import (
    DEFAULT_WORK_DIR,
    add_config_arguments,
    add_launcher_arguments,
    check_annotation_files,
    check_cached_galleries,
    check_evaluation_keys,
    load_run_config,
)
from xmr.utils.cli import UserError, given_folder, run_tool


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Train an xmr model')
    parser.add_argument('config', help='config file')
    parser.add_argument('--work-dir', help='where logs and checkpoints go '
                        f'(default: {DEFAULT_WORK_DIR})')
    parser.add_argument('--resume', nargs='?', type=str, const='latest',
                        help="resume from a checkpoint PATH, from 'latest' (the default when the "
                        "flag has no value): the work dir's latest checkpoint, an error if there "
                        "is none, or 'auto': the latest checkpoint if any, else a new run")
    parser.add_argument('--amp', action='store_true',
                        help='mixed precision: bf16 where supported, fp16 + loss scaling on '
                        'older GPUs; for GPUs: on a CPU it is slower than fp32 (the log names '
                        'the autocast dtype)')
    parser.add_argument('--amp-dtype', choices=['bfloat16', 'float16'],
                        help='force the autocast precision of --amp (implies --amp); float16 '
                        'comes with loss scaling')
    parser.add_argument('--test', nargs='?', choices=['last', 'best'], const='last',
                        help="after training, test a checkpoint in this process as "
                        "tools/test.py does: 'last' (the default when the flag has no value), "
                        "the final weights, or 'best', the best validation's (the checkpoint "
                        "hook's save_best); the leaderboard is printed and the result written "
                        'beside the checkpoint as <checkpoint>_test.json')
    add_config_arguments(parser)
    add_launcher_arguments(parser, 'training')
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def build_config(args: argparse.Namespace) -> Config:
    from xmr.engine.amp import enable_amp
    from xmr.engine.distributed import launcher_rank
    from xmr.engine.work_dir import refuse_running_training, training_checkpoints
    from xmr.models.language.carried_vocabulary import read_vocabulary_from

    cfg = load_run_config(args.config, ablations=args.ablation, cfg_options=args.cfg_options,
                          work_dir=args.work_dir)
    check_training_keys(cfg, args.config)
    check_checkpoint_hooks(cfg, args.config)
    given_folder(cfg.work_dir, '--work-dir' if args.work_dir else 'work_dir',
                 'give a folder for the run (made if absent)')
    for split in ('val', 'test'):
        check_evaluation_keys(cfg, split)
    check_cached_galleries(cfg, 'val')
    check_test_after_training(cfg, args.test, args.config)
    cfg.launcher = args.launcher
    if args.amp or args.amp_dtype:
        enable_amp(cfg, args.amp_dtype)
    # Rank 0 alone: the others would find the lock rank 0 takes once this has passed.
    if launcher_rank(args.launcher) == 0:
        # Before its checkpoints are read: a running run's are no earlier run's.
        refuse_running_training(cfg.work_dir)
    resume = args.resume if args.resume is not None else config_resume(cfg)
    key = '--resume' if args.resume is not None else 'load_from (resume = True)'
    checkpoint = resume_checkpoint(resume, cfg.work_dir, key, checkpoint_folder(cfg))
    if checkpoint is not None:
        cfg.resume, cfg.load_from = True, checkpoint  # checked by resume_checkpoint
    else:
        if resume is not None:
            cfg.resume = False  # --resume auto found nothing: a new run
            stopped_best = training_checkpoints(cfg.work_dir)  # best_*.pth alone: allowed
            if stopped_best and _is_xmr_checkpoint_hook(cfg.get('default_hooks', {}).get(
                    'checkpoint')):
                cfg.default_hooks.checkpoint.earlier_best = stopped_best
        check_load_from(cfg.get('load_from'))
    if cfg.get('load_from') and '://' not in str(cfg.load_from):
        # The embedding rows of the weights read were trained on their vocabulary's ids.
        read_vocabulary_from(cfg.model, cfg.load_from)
    return cfg


def _is_xmr_checkpoint_hook(hook_cfg: Any) -> bool:
    """Whether ``hook_cfg`` builds xmr's ``CheckpointHook`` (which takes ``earlier_best``)."""
    from xmr.engine.hooks import CheckpointHook
    from xmr.registry import HOOKS

    kind = hook_cfg.get('type') if isinstance(hook_cfg, dict) else None
    kind = HOOKS.get(kind) if isinstance(kind, str) else kind
    return isinstance(kind, type) and issubclass(kind, CheckpointHook)


def check_training_keys(cfg: Config, config: str) -> None:
    """The config gives what a training run needs, checked before the runner builds the model:
    a test-only config (a zero-shot evaluation) has none of it, and ``--amp`` met its missing
    ``optim_wrapper`` as an ``AttributeError``.

    Raises:
        UserError: naming the keys missing, and the test tool for a test-only config.
    """
    keys = ('train_dataloader', 'train_cfg', 'optim_wrapper')
    missing = [key for key in keys if cfg.get(key) is None]
    if not missing:
        return
    if len(missing) == len(keys):
        raise UserError(config, f'has no {", ".join(keys[:-1])} and {keys[-1]}: a test-only '
                        'config, nothing to train', 'evaluate it with tools/test.py CONFIG '
                        '[CHECKPOINT]')
    raise UserError(config, f'has no {" and ".join(missing)}', f'a training run needs all of '
                    f'{", ".join(keys)}')


#: The hooks of ``configs/_base_/default_runtime.py`` a run's checkpoints need, and why.
CHECKPOINT_HOOKS = {
    'WeightsOnlyCheckpointHook': "its checkpoints would hold MMEngine's log objects, which "
                                 'tools/test.py and --resume refuse',
    'RNGStateHook': 'a resumed run would draw other random numbers than the run it continues',
}


def check_checkpoint_hooks(cfg: Config, config: str) -> None:
    """``custom_hooks`` holds :data:`CHECKPOINT_HOOKS` (or subclasses): a config's own
    ``custom_hooks`` replaces its base's list, and ``[dict(type='MyHook')]`` dropped them
    without a word.

    Raises:
        UserError: naming those missing and the list that keeps them.
    """
    from xmr.registry import HOOKS

    given = [hook.get('type') for hook in cfg.get('custom_hooks') or []]
    classes = [HOOKS.get(kind) if isinstance(kind, str) else kind for kind in given]
    missing = [name for name in CHECKPOINT_HOOKS
               if not any(isinstance(kind, type) and issubclass(kind, HOOKS.get(name))
                          for kind in classes)]
    if missing:
        raise UserError(f'{config} (custom_hooks)', ' and '.join(
            f'lacks {name} ({CHECKPOINT_HOOKS[name]})' for name in missing) + "; a config's "
            "custom_hooks replaces its base's list", "add yours to the base's: custom_hooks = "
            "[*_base_.custom_hooks, dict(type='MyHook')]")


def check_load_from(load_from: str | None) -> None:
    """A local ``load_from`` exists and is a whole checkpoint, checked before the runner writes
    its config dump and log (MMEngine's ``torch.load`` names no file: ``EOFError:``).

    Raises:
        UserError: missing, a folder or unreadable, naming the path and ``load_from``.
        CheckpointReadError: an empty, foreign, truncated or damaged file, naming it.
    """
    from xmr.engine.checkpoint import CHECKPOINT_FIX, check_given_checkpoint

    if load_from is None or '://' in str(load_from):
        return
    check_given_checkpoint(load_from, 'load_from', f'{CHECKPOINT_FIX}, or load_from=None')


def check_test_after_training(cfg: Config, which: str | None, config: str) -> None:
    """What ``--test`` tests will be there, checked before training: the config has a test
    split, and its checkpoint hook saves the final iteration (``last``) or a best validation
    (``best``).

    Raises:
        UserError: naming the config and the key at fault.
    """
    if which is None:
        return
    if cfg.get('test_dataloader') is None:
        raise UserError(config, 'has no test_dataloader, test_evaluator and test_cfg: --test '
                        'has no test split to test the trained model on', 'drop --test, or give '
                        'the config a test split')
    check_cached_galleries(cfg, 'test')
    hook = (cfg.get('default_hooks') or {}).get('checkpoint')
    if hook is None:
        raise UserError('default_hooks.checkpoint', 'is None: the run saves no checkpoint for '
                        f'--test {which} to test', 'drop --test, or keep the checkpoint hook')
    if which == 'last' and hook.get('save_last') is False:
        raise UserError('default_hooks.checkpoint.save_last', 'is False: the final weights that '
                        '--test tests may be left unsaved', 'set save_last=True, or test a '
                        'checkpoint by path with tools/test.py')
    save_best, validated = hook.get('save_best'), cfg.get('val_dataloader') is not None
    one_metric = isinstance(save_best, str) or bool(save_best) and len(save_best) == 1
    if which == 'best' and not (one_metric and validated):
        raise UserError('default_hooks.checkpoint.save_best', f'is {save_best!r}'
                        + ('' if validated else ' and the config has no val_dataloader')
                        + ': --test best tests the checkpoint of the best validation by one '
                        "metric", "validate and name one metric (save_best='mAR'), or test the "
                        'final weights: --test last')


def tested_checkpoint(runner, which: str) -> str:
    """The checkpoint that ``--test`` names (``last`` or ``best``) once ``runner`` has trained:
    the checkpoint hook's record in the message hub, which a resumed run's checkpoint carries.

    Raises:
        UserError: no validation saved a best checkpoint, or a hook stopped training early
            (``last``: its final weights are not saved).
    """
    from mmengine.hooks import CheckpointHook

    checkpoint = runner.message_hub.get_info('last_ckpt' if which == 'last' else 'best_ckpt')
    if checkpoint is None:
        raise UserError(runner.work_dir, f'the run saved no {which} checkpoint for --test to test'
                        + (' (no validation ran, or none reported a number: NaN is never the '
                           'best)' if which == 'best' else ''), 'test a '
                        'checkpoint by path with tools/test.py CONFIG CHECKPOINT')
    saver = next((hook for hook in runner.hooks if isinstance(hook, CheckpointHook)), None)
    final = None if saver is None else saver.filename_tmpl.format(runner.iter)
    # A hook that stopped training early (EarlyStoppingHook) leaves the final weights unsaved:
    # the last checkpoint is an earlier iteration's.
    if which == 'last' and runner.iter < runner.max_iters and Path(checkpoint).name != final:
        raise UserError(checkpoint, f'is the last checkpoint, but training stopped at iteration '
                        f'{runner.iter} of {runner.max_iters} (a hook set stop_training) and '
                        'saved no checkpoint of its final weights', 'test the best validation\'s '
                        'checkpoint (--test best), or this one by path with tools/test.py CONFIG '
                        'CHECKPOINT')
    return str(checkpoint)


def test_after_training(args: argparse.Namespace, checkpoint: str) -> None:
    """Test ``checkpoint`` with ``tools/test.py`` (the copy beside this tool) in this process,
    given the training's config, ``--ablation`` rows, ``--cfg-options`` and launcher, which the
    result records as the command that repeats the test."""
    from mmengine.dist import barrier, is_main_process
    from mmengine.logging import print_log

    spec = importlib.util.spec_from_file_location('xmr_test_tool',
                                                  Path(__file__).with_name('test.py'))
    test_tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(test_tool)
    argv = [args.config, checkpoint]
    if args.launcher != 'none':
        argv += ['--launcher', args.launcher]
    if args.ablation:
        argv += ['--ablation', *args.ablation]
    if getattr(args, 'cfg_options_given', None):
        argv += ['--cfg-options', *args.cfg_options_given]
    barrier()  # the main process has written the checkpoint every process loads
    test_args = test_tool.parse_args(argv)
    json_path, _ = test_tool.output_paths(test_args)
    if not json_path.exists():
        test_tool.main(argv)
    elif not is_this_test(json_path, Path(checkpoint), test_args.command):
        raise UserError(json_path, 'exists and is kept (an earlier test of the checkpoint, '
                        'with other options, or another file); the training is done', 'test '
                        f'the checkpoint with {test_args.command} --overwrite (replacing an '
                        'earlier result) or --out OTHER.json')
    elif is_main_process():
        print_log(f'{checkpoint} was tested before by this command; its result, {json_path}, '
                  'is shown, not computed again', logger='current', level=logging.WARNING)
        test_tool.main(['--compare', str(json_path)])


def is_this_test(json_path: Path, checkpoint: Path, command: str) -> bool:
    """Whether ``json_path`` is the result of ``command`` (a ``tools/test.py`` line) on
    ``checkpoint`` as it is now: a result recording that command, written after the file."""
    from xmr.evaluation import load_result

    try:
        earlier = load_result(json_path)
    except (FileNotFoundError, ValueError):
        return False
    return (earlier.extra.get('command') == command
            and json_path.stat().st_mtime_ns >= checkpoint.stat().st_mtime_ns)


def config_resume(cfg: Config) -> str | None:
    """The ``--resume`` that the config's ``resume = True`` means (MMEngine's meaning): its
    ``load_from``, else the work dir's latest checkpoint if any (``auto``), so that it is checked
    as the flag is, and a new run is not refused for the checkpoints it resumes from."""
    if not cfg.get('resume'):
        return None
    return cfg.get('load_from') or 'auto'


def resume_checkpoint(resume: str | None, work_dir: str, key: str = '--resume',
                      saved_in: str | None = None) -> str | None:
    """The checkpoint that ``--resume`` names (see the module docstring), or ``None``.

    Args:
        resume: ``--resume``'s value (or the config's ``resume = True``'s, :func:`config_resume`).
        work_dir: the run's work dir, where ``latest`` and ``auto`` look.
        key: where ``resume`` came from, for the messages.
        saved_in: where the run saves its checkpoints (:func:`checkpoint_folder`), when not in
            ``work_dir``.

    Raises:
        UserError: ``PATH`` is missing, a folder or unreadable (naming ``key``), ``latest``
            finds no checkpoint, a new run would overwrite checkpoints
            (:func:`refuse_earlier_checkpoints`), or ``PATH`` resumes before checkpoints of
            the folders would overwrite (:func:`refuse_later_checkpoints`).
        CheckpointReadError: the checkpoint is empty, foreign or truncated, or keeps weights
            alone (no iteration to resume at: :func:`~xmr.engine.checkpoint.refuse_unresumable`);
            checked before the runner writes its config dump and log into the work dir.
    """
    from mmengine.logging import print_log

    from xmr.engine.checkpoint import (
        CHECKPOINT_FIX,
        check_checkpoint,
        check_given_checkpoint,
        check_resumable,
    )
    from xmr.engine.hooks.checkpoint import FINISHED_MARKER
    from xmr.engine.work_dir import (
        latest_checkpoint,
        newest_periodic_checkpoint,
        training_checkpoints,
    )

    folders = dict.fromkeys((work_dir, saved_in or work_dir))
    if resume is None:
        for folder in folders:
            refuse_earlier_checkpoints(folder)
        return None
    if resume not in ('latest', 'auto'):
        check_given_checkpoint(resume, key, f'{CHECKPOINT_FIX}, or --resume alone for the '
                               "work dir's latest")
        iteration = check_resumable(resume)
        for folder in folders:
            refuse_later_checkpoints(folder, resume, iteration)
        return resume
    checkpoint = latest_checkpoint(work_dir)
    if checkpoint is None:
        # A kill between the first iter_<n>.pth and its pointer left them apart.
        checkpoint = newest_periodic_checkpoint(work_dir)
        if checkpoint is not None:
            print_log(f'{work_dir} has no last_checkpoint: resuming from its newest checkpoint, '
                      f'{os.path.basename(checkpoint)}', logger='current', level=logging.WARNING)
    if checkpoint is not None:
        check_checkpoint(checkpoint)
        check_resumable(checkpoint)
        return checkpoint
    best = training_checkpoints(work_dir)  # best_*.pth alone, if any: no iter_*.pth
    if best and os.path.isfile(os.path.join(work_dir, FINISHED_MARKER)):
        # Its best is not to be replaced by training again.
        raise UserError(work_dir, 'holds the best checkpoints of a run that ended '
                        f'({", ".join(best)}) and saved no periodic checkpoint (save_last='
                        'False): there is nothing to resume', 'test them with tools/test.py, '
                        'train into another --work-dir, or remove them to train again')
    if resume == 'latest':
        raise UserError(work_dir, '--resume: the work dir has no checkpoint to resume from (no '
                        'last_checkpoint, no iter_*.pth' + (f'; {best[0]} keeps no optimiser '
                                                            'state to resume' if best else '')
                        + ')', 'drop --resume to start a new run' + (
                            ' (--resume auto replaces the best checkpoints of the run stopped '
                            'before its first checkpoint)' if best else '')
                        + ', or name one: --resume PATH')
    if best:
        # A requeued job stopped after a validation but before its first periodic checkpoint:
        # its new run replaces each at its own first best (CheckpointHook).
        print_log(f'--resume auto: no checkpoint to resume in {work_dir}; starting a new run, '
                  f'which replaces {", ".join(best)} (saved by a run stopped before its first '
                  'checkpoint) with its own best', logger='current', level=logging.WARNING)
    else:
        print_log(f'--resume auto: no checkpoint in {work_dir}; starting a new run',
                  logger='current')
    return None


def checkpoint_folder(cfg: Config) -> str:
    """Where the run saves its checkpoints: the work dir, or with the checkpoint hook's
    ``out_dir``, ``<out_dir>/<work dir's name>`` (MMEngine's ``CheckpointHook``)."""
    out_dir = ((cfg.get('default_hooks') or {}).get('checkpoint') or {}).get('out_dir')
    if out_dir is None:
        return cfg.work_dir
    return os.path.join(out_dir, os.path.basename(os.path.normpath(cfg.work_dir)))


def refuse_earlier_checkpoints(work_dir: str) -> None:
    """Refuse a new run in a work dir that holds checkpoints (``iter_*.pth``, ``best_*.pth``).

    The files decide, not ``last_checkpoint``: a work dir copied without it, or whose pointer
    names a deleted file, still holds checkpoints that a new run would overwrite.

    Raises:
        UserError: naming the checkpoints and the ways out.
    """
    from xmr.engine.work_dir import training_checkpoints

    found = training_checkpoints(work_dir)
    if found:
        shown = ', '.join(found[:3]) + (f', ... ({len(found)} in all)' if len(found) > 3 else '')
        raise UserError(work_dir, f'holds the checkpoints of an earlier run ({shown}), which a '
                        'new run would overwrite and mix with its own', 'continue it with '
                        '--resume (--resume PATH where last_checkpoint names a deleted file; '
                        '--resume auto where it saved best_*.pth alone), train into another '
                        '--work-dir, or remove them to start afresh')


def refuse_later_checkpoints(folder: str, checkpoint: str, iteration: int) -> None:
    """Refuse to resume ``checkpoint`` (at ``iteration``) where ``folder`` holds checkpoints
    past it (``iter_<n>.pth``, ``best_*_iter_<n>.pth``): its run would overwrite those of its
    iterations and leave the others beside its own, as a new run would
    (:func:`refuse_earlier_checkpoints`); the newest would be resumed by ``--resume auto``.

    Raises:
        UserError: naming the checkpoints and the ways out.
    """
    from xmr.engine.work_dir import checkpoints_past

    later = checkpoints_past(folder, iteration)
    if later:
        shown = ', '.join(later[:3]) + (f', ... ({len(later)} in all)' if len(later) > 3 else '')
        raise UserError(folder, f'holds checkpoints past iteration {iteration}, where '
                        f'{checkpoint} resumes ({shown}), which its run would overwrite and mix '
                        'with its own', 'resume the newest with --resume, resume this one into '
                        'another --work-dir (its checkpoints go there), or move them away to '
                        'go on from it here')


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from mmengine.logging import print_log

    from xmr.datasets.held_out import check_test_held_out
    from xmr.engine.checkpoint import allow_mmengine_checkpoint_types
    from xmr.engine.distributed import launcher_rank
    from xmr.engine.hooks import PreemptionHook
    from xmr.engine.process import prepare_process
    from xmr.engine.runner import (
        ResumeCheckedRunner,
        runner_instances_released,
        runner_name_in_process,
    )
    from xmr.engine.work_dir import lock_work_dir, unlock_work_dir

    allow_mmengine_checkpoint_types()
    cfg = build_config(args)
    # Here, not in build_config, which computes a shipped config's schedule without its data.
    check_annotation_files(cfg, ['train', 'val'] + ['test'] * (args.test is not None))
    if args.test is not None:
        # Once its files are known present; the test checks again, after the whole training.
        check_test_held_out(cfg)
    prepare_process(cfg, args.launcher)
    if launcher_rank(args.launcher) == 0:
        # Before the runner: it dumps the config and opens its log in the work dir, which a
        # second run must not touch while another trains there (WorkDirLockHook holds it on).
        taken_over = lock_work_dir(cfg.work_dir)
        if taken_over:
            print_log(taken_over, logger='current', level=logging.WARNING)
    with runner_instances_released():  # a main called again from Python: its own log
        # Held through --test, whose result is written into the work dir; given back whatever
        # fails (the runner's build, a checkpoint refused as it loads, training, the test).
        try:
            name = cfg.get('experiment_name') or Path(args.config).stem
            if (own := runner_name_in_process(name)) != name:
                cfg.experiment_name = own  # the first keeps MMEngine's name, and its dump its keys
            runner = ResumeCheckedRunner.from_cfg(cfg)
            runner.train()
            # A signal after the last iteration stopped nothing (PreemptionHook logs it): exit 0.
            stopped_by = next((hook.stopped_by for hook in runner.hooks
                               if isinstance(hook, PreemptionHook)), None)
            if stopped_by is not None:
                raise SystemExit(128 + stopped_by)  # a run cut short, as the signal's exit says
            if args.test is not None:
                checkpoint = tested_checkpoint(runner, args.test)
                del runner  # its model, optimiser state and loaders: the test builds its own
                gc.collect()
                test_after_training(args, checkpoint)
        finally:
            unlock_work_dir(cfg.work_dir)


if __name__ == '__main__':
    run_tool(main)
