"""One training run per work dir: a second run refuses instead of overwriting the first's files."""
from __future__ import annotations

from mmengine.dist import is_main_process
from mmengine.hooks import Hook

from xmr.engine.work_dir import lock_work_dir, unlock_work_dir, work_dir_locked_here
from xmr.registry import HOOKS

__all__ = ['WorkDirLockHook']


@HOOKS.register_module()
class WorkDirLockHook(Hook):
    """Holds ``<work_dir>/.train.lock`` (see :func:`~xmr.engine.work_dir.lock_work_dir`) from
    the start of training to its end, on the main process.

    It runs before every other ``before_train``, so nothing of a second run (checkpoint clean-up,
    feature caches, checkpoints, the phase report) touches the work dir of a running one. It
    gives the lock back in ``after_run``, once every hook's ``after_train`` has written its
    files (the phase report, the last checkpoint): at ``after_train`` itself, a hook of the
    highest priority runs first. A lock the process held before training (``tools/train.py``
    takes it before building the runner, and keeps it through ``--test``) is left to its taker.
    A lock left by a killed run is taken over with a warning.
    """

    priority = 'HIGHEST'

    def __init__(self) -> None:
        self._taken = False

    def before_train(self, runner) -> None:
        if is_main_process():
            self._taken = not work_dir_locked_here(runner.work_dir)
            taken_over = lock_work_dir(runner.work_dir)
            if taken_over:
                runner.logger.warning(taken_over)

    def after_run(self, runner) -> None:
        if self._taken:
            unlock_work_dir(runner.work_dir)
            self._taken = False

    after_failed_train = after_run  # the failed run trains no more: others may use the dir
