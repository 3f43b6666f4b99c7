"""The runner of ``tools/train.py`` and ``tools/test.py``: a refused resume leaves the work
dir's config dump alone, and no dump replaces the config it was read from; and the name the
tools give each runner they build in a process, and what those runners leave in it."""
from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from mmengine.hooks import Hook
from mmengine.logging import MessageHub, MMLogger, print_log
from mmengine.registry import DefaultScope
from mmengine.runner import Runner
from mmengine.visualization import Visualizer

from xmr.engine.hook_points import call_failure_point
from xmr.engine.work_dir import clear_partial_files
from xmr.fileio import atomic_write_text, input_written_over

__all__ = ['ResumeCheckedRunner', 'dump_config_unless_over_source', 'runner_name_in_process',
           'runner_instances_released']

#: How many runners of each name the tools have built in this process.
_RUNNERS_NAMED: Counter[str] = Counter()


def runner_name_in_process(name: str) -> str:
    """The name of a runner the tools build in this process as ``name``: ``name`` for the
    first, ``<name>_<n>`` for the n-th (for ``cfg.experiment_name``).

    MMEngine names a runner's logger, message hub and visualizer ``<name>_<second it
    starts>``, and hands a runner that starts in the second another of its name started that
    runner's: its log file and its messages. A tool's ``main`` called again from Python (a
    notebook, a sweep, the tests) would log into the earlier run's files.
    """
    _RUNNERS_NAMED[name] += 1
    return name if _RUNNERS_NAMED[name] == 1 else f'{name}_{_RUNNERS_NAMED[name]}'


class ResumeCheckedRunner(Runner):
    """MMEngine's ``Runner`` whose config dump, when resuming, waits until the resume is accepted,
    and never replaces the config file the run was read from.

    MMEngine dumps the config into the work dir as the runner is built, before the resume
    checks: weights that do not fit the model (:class:`~xmr.engine.hooks.CheckpointHook`, while
    loading) and another schedule (:class:`~xmr.engine.loops.PhasedTrainLoop`, before
    ``before_train``). A refused resume would replace the dump of the run that wrote the
    checkpoint, the config their errors tell the user to resume with. Resuming, the dump is
    written at ``before_train`` instead, once both checks have passed, with the checkpoint's
    seed, which the run trains with.

    A work dir that is the config's own folder (``--work-dir`` naming it, ``work_dir='.'``)
    would have the dump written over the config (:func:`dump_config_unless_over_source`).
    """

    def train(self):
        """MMEngine's training; a run that raises gives back what its hooks took in
        ``before_train`` (the work dir's lock, the SIGTERM handler) through their
        ``after_failed_train``, under MMEngine's loops too. (``PhasedTrainLoop`` calls it itself,
        for runs under MMEngine's own ``Runner``; the point runs once per failure.)"""
        try:
            return super().train()
        except BaseException as failure:
            call_failure_point(self, 'after_failed_train', failure)
            raise

    def resume(self, filename: str, resume_optimizer: bool = True,
               resume_param_scheduler: bool = True, map_location: str = 'default') -> None:
        """MMEngine's resume, restoring parameter schedulers only where the run has some
        (PhasedTrainLoop sets the rates itself; MMEngine warned at every resume of it)."""
        super().resume(filename, resume_optimizer,
                       resume_param_scheduler and self.param_schedulers is not None,
                       map_location)

    def build_logger(self, *args, **kwargs) -> MMLogger:
        """MMEngine's logger, whose run log, if it cannot be written (a full disk), says so in
        one line, not in a traceback for every line logged; the terminal keeps them."""
        logger = super().build_logger(*args, **kwargs)
        for handler in logger.handlers:
            if isinstance(handler, logging.FileHandler):
                handler.handleError = partial(_run_log_unwritable, handler)
        return logger

    def dump_config(self) -> None:
        if self._resume:
            self.register_hook(_ConfigDumpHook(self.seed))  # called by __init__, hooks built
        else:
            _record_seed(self, self.seed)  # one drawn for randomness.seed=None: the dump repeats
            dump_config_unless_over_source(self)


@contextmanager
def runner_instances_released() -> Iterator[None]:
    """Forget, once the block has run, the process-wide instances its runners made current:
    their loggers (log files closed), message hubs, visualizers and default scopes.

    A tool's ``main`` called from Python (a notebook, a sweep) otherwise left its log file open
    (one more for each run) and its logger current, so that the next run's first lines went
    into this one's log, and the caller's process in xmr's registry scope. A block that raises
    keeps them: a tool run from the command line writes its error line into the run's log.
    """
    kinds = (MMLogger, MessageHub, Visualizer, DefaultScope)
    before = {kind: set(kind._instance_dict) for kind in kinds}
    yield
    for kind, kept in before.items():
        for name in [name for name in kind._instance_dict if name not in kept]:
            instance = kind._instance_dict.pop(name)
            if isinstance(instance, Visualizer):
                instance.close()
            for handler in list(getattr(instance, 'handlers', [])):
                handler.close()
                instance.removeHandler(handler)


def _run_log_unwritable(handler: logging.FileHandler, record: logging.LogRecord) -> None:
    """``handler.handleError``: the first failed write of the run log is told on stderr, with
    its file and cause; later ones are not (the terminal shows every line)."""
    if getattr(handler, 'unwritable_told', False):
        return
    handler.unwritable_told = True
    cause = sys.exc_info()[1]
    print(f'warning: {handler.baseFilename}: writing the run log failed ({cause}); its lines '
          'go to the terminal alone', file=sys.stderr)


def dump_config_unless_over_source(runner: Runner) -> None:
    """MMEngine's dump of ``runner``'s config into its work dir (the config's file name, or
    ``<timestamp>.py``), written atomically, unless it would replace the file the config was
    read from: its ``_base_`` composition and comments would be lost, the command line's
    ``--cfg-options`` baked in. The resolved config is in the log either way (MMEngine writes
    it there as the runner starts).

    MMEngine's own dump opens the file for writing before it formats the config (a third of a
    second): a resumed run interrupted then left the dump of the run that wrote the
    checkpoints empty. The temporaries of dumps interrupted by a kill are removed first."""
    source = runner.cfg.filename
    if source is not None and input_written_over(Path(runner.work_dir) / Path(source).name,
                                                  [source]):
        print_log(f'config not dumped: the work dir {runner.work_dir} holds {source}, the '
                  'config this run read, which the dump would replace; the resolved config is '
                  'at the top of the log', logger='current', level=logging.WARNING)
        return
    name = Path(source).name if source is not None else f'{runner.timestamp}.py'
    # A test's logs folder (test/ beside its checkpoint) has no checkpoint hook to clear it.
    clear_partial_files(runner.work_dir,
                        partial(print_log, logger='current', level=logging.WARNING))
    atomic_write_text(Path(runner.work_dir) / name, runner.cfg.dump())


def _record_seed(runner: Runner, seed: int) -> None:
    """Make ``seed`` the ``randomness.seed`` of ``runner``'s config: its dump, and the config
    each checkpoint keeps, then repeat the run (``None`` there draws another)."""
    runner.cfg.randomness = {**(runner.cfg.get('randomness') or {}), 'seed': seed}


class _ConfigDumpHook(Hook):
    """Dumps the runner's config as training starts, after the resume checks, with the seed
    the resumed run trains with.

    Args:
        built_seed: the seed the runner was built with, which its log names.
    """

    priority = 'VERY_HIGH'  # after WorkDirLockHook (HIGHEST), which guards the work dir

    def __init__(self, built_seed: int) -> None:
        self.built_seed = built_seed

    def before_train(self, runner) -> None:
        # MMEngine resumes with the checkpoint's seed whatever randomness.seed says, and warns
        # only where randomness.seed is set: one drawn for None is replaced without a word.
        drawn = (runner.cfg.get('randomness') or {}).get('seed') is None
        if drawn and runner.seed != self.built_seed:
            print_log(f"resumed: training with the checkpoint's seed {runner.seed}, not the "
                      f'{self.built_seed} logged above', logger='current', level=logging.WARNING)
        _record_seed(runner, runner.seed)
        dump_config_unless_over_source(runner)
