"""MMEngine's early stopping, resumable: its best score and count of validations without
improvement travel in checkpoints."""
from __future__ import annotations

from mmengine.hooks import EarlyStoppingHook as MMEngineEarlyStoppingHook

from xmr.registry import HOOKS


@HOOKS.register_module()
class EarlyStoppingHook(MMEngineEarlyStoppingHook):
    """MMEngine's ``EarlyStoppingHook`` (same options), whose state a resumed run takes up.

    MMEngine keeps the best score and the count of validations without improvement in memory
    only, so a resumed run started both afresh: a preempted run stopped later than the
    uninterrupted one, and a run that had stopped, requeued with ``--resume auto``, trained on.
    Here a checkpoint carries them as they were when it was written, before the validation of
    its iteration, which a resumed run makes up (``PhasedTrainLoop``): that validation decides
    the stop again, on the same weights and the same state.
    """

    def before_train(self, runner) -> None:
        """Warn, before anything trains, that a stop ends every phase: MMEngine's hook stops
        the run, so a stop in ``cross_lingual`` left ``cross_modal`` untrained, and its best
        score carries from one phase's metrics to the next's."""
        phases = [phase.name for phase in getattr(runner.train_loop, 'phases', ())]
        if len(phases) > 1:
            runner.logger.warning(
                f'EarlyStoppingHook({self.monitor!r}) stops the whole run: a stop in phase '
                f'{phases[0]} leaves {phases[1:]} untrained, and its best score carries across '
                "phases. To keep each phase's best validation instead, give the next phase "
                f"start_from_best={self.monitor!r} (train_cfg.phases)")

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint['early_stopping'] = dict(monitor=self.monitor, best_score=self.best_score,
                                            wait_count=self.wait_count)

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        state = checkpoint.get('early_stopping')
        # A checkpoint of another monitor's run (a changed config) has nothing to take up.
        if runner._resume and state is not None and state['monitor'] == self.monitor:
            self.best_score, self.wait_count = state['best_score'], state['wait_count']
