"""The weights of a phase's best validation, for the next phase to start from.

DASD's authors run each alignment stage as its own run, and the cross-modal stage loads the
cross-lingual checkpoint best on validation (their CMA config reads step 18,000 of 45,000),
not the last weights. A phase with ``start_from_best='mAR'`` does the same inside one run.
"""
from __future__ import annotations

import glob
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from mmengine.dist import barrier, is_main_process
from torch import Tensor, nn

from xmr.engine.checkpoint import read_checkpoint
from xmr.engine.phases import Phase
from xmr.engine.work_dir import clear_partial_files
from xmr.engine.wrappers import unwrap_model
from xmr.fileio import atomic_torch_save

FOLDER = 'phase_best'


def best_info_key(phase: Phase) -> str:
    """The message-hub key of ``phase``'s best validation: ``{'score', 'iteration', 'path'}``."""
    return f'phase_best/{phase.name}'


class PhaseBest:
    """Keeps the weights of each phase's best validation that a later phase starts from.

    At a validation of a tracked phase that beats its best, the parameters the phase trains are
    written to ``<work_dir>/phase_best/<phase>_iter_<n>.pth`` (atomically, by the main process)
    and the score and iteration to the message hub, which checkpoints carry: a resumed run
    reads the file of the best its checkpoint records, never one a killed run wrote after it.
    The successor, entered afresh, loads that file and the phase's other files are removed.
    The buffers of the modules it trains go back with their weights (a BatchNorm's running
    statistics: its weights with the last iteration's statistics never ran together); other
    buffers (a loss's counters) keep their values (:func:`trained_state`).

    Args:
        phases: the run's phases; a phase's ``start_from_best`` names the validation metric
            (greater is better) whose best during the phase before it picks its start.

    Raises:
        ValueError: the first phase asks for a start from a best (no phase precedes it).
    """

    def __init__(self, phases: Sequence[Phase]) -> None:
        if phases[0].start_from_best is not None:
            raise ValueError(f'phase {phases[0].name}: start_from_best='
                             f'{phases[0].start_from_best!r} starts the phase from the best '
                             'validation of the phase before it, and the first phase has none')
        #: ``(phase, successor)`` pairs where the successor starts from the phase's best.
        self.pairs = [(before, after) for before, after in zip(phases, phases[1:])
                      if after.start_from_best is not None]
        #: phase name -> the metric its successor starts from the best of.
        self.metrics = {before.name: after.start_from_best for before, after in self.pairs}

    def check_validated(self, has_val_loop: bool, val_interval: int,
                        validate_at_phase_end: bool) -> None:
        """Each tracked phase is validated: at its start, its end or a ``val_interval``
        iteration inside it, before any step.

        Raises:
            ValueError: naming both phases and the settings that validate.
        """
        for before, phase in self.pairs:
            validated = has_val_loop and (
                validate_at_phase_end or before.validate_at_start or bool(
                    val_interval and before.end // val_interval > before.start // val_interval))
            if not validated:
                raise ValueError(
                    f'phase {phase.name}: start_from_best={phase.start_from_best!r} starts from '
                    f'the best validation of phase {before.name}, which is never validated; '
                    'give the run a val_dataloader and validate the phase '
                    '(train_cfg.validate_at_phase_end=True or a val_interval inside it)')

    def remove_partial_files(self, runner) -> None:
        """Remove the partial files (``.<name>.<host>-<pid>.tmp``) of runs killed while writing a
        best to ``<work_dir>/phase_best``, which no later run replaced or removed."""
        if is_main_process():
            clear_partial_files(Path(runner.work_dir) / FOLDER, runner.logger.warning)

    def record(self, runner, phase: Phase, metrics: Mapping[str, float], iteration: int) -> None:
        """Keep the trained weights if this validation of ``phase`` beats its best (a NaN
        score, as a diverged model reports, never does).

        Raises:
            KeyError: the validation reported no value of the tracked metric.
        """
        metric = self.metrics.get(phase.name)
        if metric is None:
            return
        if metric not in metrics:
            raise KeyError(f'phase {phase.name}: its validation reported no {metric!r}, which '
                           f'the next phase\'s start_from_best names; it reported '
                           f'{sorted(metrics)}')
        score = float(metrics[metric])
        if math.isnan(score):  # compares False with every best, so it would replace any
            runner.logger.warning(f'phase {phase.name}: {metric} is NaN at iteration '
                                  f'{iteration}; this validation cannot be the best')
            return
        hub = runner.message_hub
        best = hub.get_info(best_info_key(phase))
        if best is not None and score <= best['score']:
            return
        path = self.path(runner.work_dir, phase, iteration)
        if is_main_process():
            model = unwrap_model(runner.model)
            atomic_torch_save(trained_state(model), path)
        hub.update_info(best_info_key(phase), dict(score=score, iteration=iteration,
                                                   path=str(path.resolve())))
        runner.logger.info(f'phase {phase.name}: best {metric} {score:.4f} so far, at iteration '
                           f'{iteration}; the next phase starts from these weights')

    def restore(self, runner, before: Phase, phase: Phase) -> None:
        """Load ``before``'s best trained weights into the model, as ``phase`` starts.

        Raises:
            RuntimeError: ``before`` has no recorded validation, or its file is gone.
        """
        best = runner.message_hub.get_info(best_info_key(before))
        if best is None:
            raise RuntimeError(f'phase {phase.name}: start_from_best={phase.start_from_best!r}, '
                               f'but phase {before.name} was never validated; validate it '
                               '(train_cfg.validate_at_phase_end=True or val_interval)')
        # This work dir's own file of that name, as latest_checkpoint reads: a work dir moved
        # or copied elsewhere holds it there, and a copy must neither depend on the original
        # nor remove its own file below. Else the recorded path: a run resumed from another
        # work dir's checkpoint (a fork) reads the file that run wrote.
        barrier()  # the main process has written it
        own = self.path(runner.work_dir, before, best['iteration']).resolve()
        path = own if own.is_file() else Path(best['path'])
        if not path.is_file():
            raise RuntimeError(f'phase {phase.name}: the weights of phase {before.name}\'s best '
                               f'validation (iteration {best["iteration"]}) are gone: {path}; '
                               'resume from the latest checkpoint, which records the file kept')
        weights = read_checkpoint(path, f'phase {before.name} best weights')
        model = unwrap_model(runner.model)
        unknown = sorted(set(weights) - model.state_dict(keep_vars=True).keys())
        if unknown:
            raise RuntimeError(f'{path}: parameters {unknown[:5]} are not in the model')
        model.load_state_dict(weights, strict=False)
        runner.logger.info(f'phase {phase.name}: starts from the weights of phase {before.name}\'s '
                           f'best validation ({phase.start_from_best} {best["score"]:.4f} at '
                           f'iteration {best["iteration"]}), {path}')
        if is_main_process():  # this run's own files only, never a forked run's
            for stale in own.parent.glob(f'{glob.escape(before.name)}_iter_*.pth'):
                if stale != path:
                    stale.unlink(missing_ok=True)

    @staticmethod
    def path(work_dir: str | os.PathLike, phase: Phase, iteration: int) -> Path:
        """The file of ``phase``'s trained weights at its validation at ``iteration``."""
        return Path(work_dir) / FOLDER / f'{phase.name}_iter_{iteration}.pth'


def trained_state(model: nn.Module) -> dict[str, Tensor]:
    """The parameters of ``model`` that train (``requires_grad``) and the persistent buffers of
    the modules holding them, by their ``state_dict`` names, on the CPU."""
    owners = {name for name, module in model.named_modules()
              if any(p.requires_grad for p in module.parameters(recurse=False))}
    return {name: value.detach().cpu()
            for name, value in model.state_dict(keep_vars=True).items()
            if name.rpartition('.')[0] in owners
            and (value.requires_grad or not isinstance(value, nn.Parameter))}
