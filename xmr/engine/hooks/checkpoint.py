"""MMEngine's ``CheckpointHook`` made safe under faults: atomic files, no gap without a best
checkpoint, strict resume.

Registered as ``CheckpointHook`` in xmr's scope, so every config with ``default_scope='xmr'``
(all shipped ones, through ``default_hooks.checkpoint``) gets it. Differences from MMEngine's:

* files are written through :class:`~xmr.fileio.AtomicLocalBackend` (temporary name, fsync,
  rename), and ``last_checkpoint`` likewise (MMEngine writes it in place): a kill or a full
  disk never leaves a truncated file under a checkpoint's name nor an empty pointer, and
  temporaries left by a killed run are removed when training starts;
* ``max_keep_ckpts`` counts the periodic checkpoints (and the last): one saved between them,
  at the iteration of a new best (MMEngine saves it again to record the best) or of a signal's
  stop (:class:`~xmr.engine.hooks.preemption.PreemptionHook`), is an interim checkpoint, kept
  until the next checkpoint is in place (MMEngine counts it, and its removal of the oldest lost
  a periodic checkpoint at each new best);
* the previous best checkpoint, and checkpoints beyond ``max_keep_ckpts``, are removed only
  after their successor is in place (MMEngine removes them first), and only from this run's
  work dir: a run resumed from another work dir's checkpoint (a fork) inherits that run's best
  path and score, and leaves its file where it is; a work dir moved or copied elsewhere takes
  its own files of the recorded best's and last checkpoint's names (the last is the one
  ``tools/train.py --test`` tests after a run resumed at its end);
* resuming loads strictly: a checkpoint whose weights do not fit the model (other adapter
  shapes, other languages) is refused, naming the keys and shapes, instead of training on
  with re-initialised modules, and a file of weights alone (no iteration, logs or optimiser
  state: :func:`~xmr.engine.checkpoint.refuse_unresumable`) is refused naming ``load_from``;
  its facts (``_extra_state``) are compared by value, as ``xmr.apis`` compares them, not by
  the length of their JSON. ``load_from`` without resume
  keeps MMEngine's lenient loading, logging what it leaves as built, but refuses a checkpoint
  of another backbone, width or language set (:func:`refuse_other_facts`), as a resume does,
  and one that holds the model's facts alone (no weight: as ``xmr.apis`` refuses it);
* every checkpoint's ``meta`` records the xmr that wrote it (``xmr_version``, ``xmr_commit``:
  :func:`~xmr.version.provenance`), which a refused resume names beside the xmr reading it;
* before each periodic checkpoint, every rank calls the hooks' ``before_checkpoint_on_every_rank``
  (:func:`~xmr.engine.hook_points.call_hook_point`), where a hook gathers what rank 0 saves
  (``RNGStateHook``: each rank's random streams), and xmr's ``OptimWrapper`` gathers each
  rank's gradients of an accumulation window under way (``gather_pending_grads``).
"""
from __future__ import annotations

import contextlib
import math
import numbers
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mmengine.dist import is_main_process
from mmengine.hooks import CheckpointHook as MMEngineCheckpointHook
from torch import nn

from xmr.engine.checkpoint import (
    FACTS,
    foreign_checkpoint_fix,
    keys_of_another_model,
    refuse_unresumable,
    state_dict_mismatches,
)
from xmr.engine.eval_loops import expected_metric_keys
from xmr.engine.hook_points import call_hook_point
from xmr.engine.work_dir import clear_partial_files, own_file
from xmr.engine.wrappers import unwrap_model
from xmr.fileio import atomic_write_text
from xmr.models.retrievers.checkpoint_facts import check_checkpoint_facts, decode_facts
from xmr.registry import HOOKS
from xmr.utils.cli import UserKeyError, did_you_mean
from xmr.version import provenance, written_by

#: Written into the work dir as a training run ends (its last iteration), removed as a new one
#: starts: best checkpoints alone beside it are a finished run's, not a stopped start's.
FINISHED_MARKER = '.train_finished'

#: The message hub's record of the interim checkpoint in place (a resumed run removes it).
INTERIM_KEY = 'interim_ckpt_step'
#: The message hub's record, in each checkpoint, of the checkpoints its save makes outdated
#: (removed once it is in place): a run killed between the two leaves them, which its resume
#: removes, as nothing else would.
OUTDATED_KEY = 'outdated_ckpts'

__all__ = ['FINISHED_MARKER', 'CheckpointHook', 'check_best_keys', 'check_metric_names',
           'refuse_foreign_weights', 'refuse_other_facts']


@HOOKS.register_module()
class CheckpointHook(MMEngineCheckpointHook):
    """MMEngine's ``CheckpointHook`` with atomic writes, late removals and strict resume.

    Args:
        backend_args: MMEngine file backend arguments; default: the atomic local backend.
        earlier_best: names of best checkpoints in the work dir that a run stopped before its
            first periodic checkpoint saved (``tools/train.py --resume auto`` sets them): this
            new run's own first best of each key replaces them instead of leaving them beside.
        **kwargs: :class:`mmengine.hooks.CheckpointHook` arguments.
    """

    #: Where ``**kwargs`` go: a misspelt option is refused when the config loads, not at the
    #: first save. MMEngine's hook hands the options it does not take on to
    #: ``Runner.save_checkpoint``, but after passing every argument of it (``filename``,
    #: ``meta``, ...) itself, so that any such option fails the save: its own options alone.
    forwards_options_to = (MMEngineCheckpointHook.__init__,)

    def __init__(self, backend_args: dict | None = None, earlier_best: Sequence[str] = (),
                 **kwargs: Any) -> None:
        super().__init__(backend_args=backend_args or dict(backend='xmr_atomic_local'),
                         **kwargs)
        self.earlier_best = list(earlier_best)
        self._earlier_best: list[Path] = []
        #: The iteration of the interim checkpoint in place (:meth:`save_interim_checkpoint`).
        self.interim_step: int | None = None
        self._saving_interim = False
        #: Per key, the best checkpoint a validation's new best replaces (while it is saved).
        self._replaced_best: dict[str, str | None] = {}

    def before_train(self, runner) -> None:
        super().before_train(runner)
        # PhasedTrainLoop sets the rates itself (no param_scheduler): MMEngine would warn at
        # every save that there is none to save.
        self.save_param_scheduler &= runner.param_schedulers is not None
        expected = (expected_metric_keys(runner.val_loop)
                    if self.save_best and runner.val_loop is not None else None)
        if expected is not None:
            check_best_keys(self.key_indicators, expected, expected=True)
        if is_main_process():
            clear_partial_files(self.out_dir, runner.logger.warning)
        self.interim_step = runner.message_hub.get_info(INTERIM_KEY) if runner._resume else None
        if runner._resume:
            self._remove_outdated(runner)
        self._earlier_best = ([] if runner._resume or not self.save_best else
                              [Path(self.out_dir, name) for name in self.earlier_best])
        if is_main_process() and not runner._resume:
            Path(runner.work_dir, FINISHED_MARKER).unlink(missing_ok=True)  # of another run
        # On every rank: each reads the hub's paths (tools/train.py --test tests on each).
        for key, path in self._best_paths().items() if self.save_best else ():
            if path is None or self._ours(path):
                continue
            own = own_file(self.out_dir, path)
            if own is not None:
                self._set_best_path(key, own)
                runner.message_hub.update_info(
                    'best_ckpt' if len(self.key_indicators) == 1 else f'best_ckpt_{key}', own)
            elif is_main_process():
                runner.logger.warning(
                    f'the best checkpoint so far, {path}, is another work dir\'s (this run '
                    'resumed from it); it stays there, and this work dir gets its own when a '
                    'validation beats that score')
        self._take_last_checkpoint(runner)

    def after_train(self, runner) -> None:
        """Publish as MMEngine does, then mark the work dir's run finished
        (:data:`FINISHED_MARKER`) unless a signal stopped it: a run that saved best checkpoints
        alone is then told from one stopped before its first periodic checkpoint."""
        # Imported here: the preemption hook saves through this one.
        from xmr.engine.hooks.preemption import PreemptionHook

        super().after_train(runner)
        stopped = any(hook.stopped_by is not None for hook in runner.hooks
                      if isinstance(hook, PreemptionHook))
        if is_main_process() and not stopped:
            atomic_write_text(Path(runner.work_dir) / FINISHED_MARKER, f'{runner.iter}\n')

    def _take_last_checkpoint(self, runner) -> None:
        """Take a resumed run's last checkpoint, as the run that wrote it had it: a validation
        that finds a new best saves the checkpoint of its iteration again (MMEngine's hook,
        to record the best in it) only where a last checkpoint is known. A work dir moved or
        copied elsewhere takes its own file of that name."""
        last = runner.message_hub.get_info('last_ckpt')
        if last is None:
            return
        if self._ours(last):
            if runner._resume and self.file_backend.isfile(last):
                self.last_ckpt = last
            return
        own = own_file(self.out_dir, last)
        if own is not None:
            self.last_ckpt = own
            runner.message_hub.update_info('last_ckpt', own)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        # Every save of the runner (periodic, best, preemption) passes here.
        checkpoint['meta'].update(provenance())

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        model = unwrap_model(runner.model)
        if not runner._resume:
            refuse_foreign_weights(runner._load_from, model.state_dict(), checkpoint)
            state = checkpoint.get('state_dict', checkpoint)
            if not isinstance(state, Mapping):
                return  # MMEngine's own error names what it holds
            loaded = {re.sub(r'^module\.', '', key): value for key, value in state.items()}
            refuse_other_facts(
                model, loaded, f'load_from={runner._load_from}', 'load_from leaves weights of '
                'other shapes as built, but takes only a checkpoint whose recorded facts (the '
                'backbone, width, languages, adapter and disentangler types and their settings) '
                "are the config's: set the config's to the checkpoint's, or train without "
                'load_from')
            mismatches = state_dict_mismatches(model.state_dict(), loaded)
            if mismatches:
                # MMEngine prints these to the terminal only: the run's log would keep no
                # trace of the modules that train from their initial weights.
                runner.logger.warning(f'load_from={runner._load_from}: loaded leniently, '
                                      + '; '.join(mismatches) + ' (left as built)')
            return
        refuse_unresumable(checkpoint, runner._load_from or 'the latest checkpoint')
        loaded = {re.sub(r'^module\.', '', key): value
                  for key, value in checkpoint['state_dict'].items()}
        resumed = f'cannot resume from {runner._load_from or "the latest checkpoint"}'
        fix = ('resume with the config (and xmr) that wrote the checkpoint, or start a new work '
               'dir (load_from=... loads a checkpoint leniently without resuming)')
        refuse_other_facts(model, loaded, resumed, fix)
        mismatches = state_dict_mismatches(model.state_dict(), loaded)
        if mismatches:
            raise ValueError(f'{resumed}: its weights do not fit the model of this config:\n  '
                             + '\n  '.join(mismatches)
                             + f"\nthe checkpoint was {written_by(checkpoint.get('meta'))}\n{fix}")

    def _save_checkpoint_with_step(self, runner, step: int, meta: dict) -> None:
        # Every rank is here (rank 0 alone saves): hooks that need each rank's part collect it,
        # as does the optimiser wrapper (each rank's gradients of an accumulation window).
        call_hook_point(runner, 'before_checkpoint_on_every_rank')
        gather_grads = getattr(runner.optim_wrapper, 'gather_pending_grads', None)
        if self.save_optimizer and gather_grads is not None:
            gather_grads()
        keep = self.max_keep_ckpts
        interim = keep > 0 and self._saving_interim and step not in self.keep_ckpt_ids
        recorded = keep > 0 and not interim and (not self.keep_ckpt_ids
                                                 or self.keep_ckpt_ids[-1] != step)
        steps = [*self.keep_ckpt_ids, step] if recorded else []
        replaced_interim = self.interim_step if self.interim_step != step else None
        if recorded:
            kept = steps[-keep:]
        else:
            kept = list(self.keep_ckpt_ids) if keep > 0 else []
        replaced = steps[:-keep] + ([] if replaced_interim is None else [replaced_interim])
        outdated = [old for old in replaced if old not in kept]
        if keep > 0:
            # The checkpoint written holds the ids kept once it is in place.
            if recorded:
                runner.message_hub.update_info('keep_ckpt_ids', kept)
            runner.message_hub.update_info(INTERIM_KEY, step if interim else None)
        runner.message_hub.update_info(OUTDATED_KEY, [
            *(self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(old))
              for old in outdated), *self._outdated_best()])
        # MMEngine's method, but for its removals (here, after the new file is in place) and
        # its plain write of last_checkpoint, which a full disk or a kill would leave empty.
        filename = self.filename_tmpl.format(step)
        self.last_ckpt = self.file_backend.join_path(self.out_dir, filename)
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        runner.save_checkpoint(
            self.out_dir, filename, self.file_client_args, save_optimizer=self.save_optimizer,
            save_param_scheduler=self.save_param_scheduler, meta=meta, by_epoch=self.by_epoch,
            backend_args=self.backend_args, **self.args)
        if is_main_process():
            atomic_write_text(Path(runner.work_dir) / 'last_checkpoint', self.last_ckpt)
            if interim:
                runner.logger.info(f'saved {filename}, the state of iteration {step} between '
                                   'periodic checkpoints; the next checkpoint replaces it')
        if recorded:
            self.keep_ckpt_ids.append(step)  # the deque's maxlen drops the outdated ids
        if keep > 0:
            self.interim_step = step if interim else None
        for old in outdated:
            self._remove(self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(old)))

    def save_interim_checkpoint(self, runner, iterations: int) -> None:
        """Save the state after ``iterations`` iterations between periodic checkpoints (a
        signal's stop): the file stays until the next checkpoint is in place, and counts
        towards no ``max_keep_ckpts``.

        Args:
            runner: the runner.
            iterations: the iterations done: ``runner.iter + 1`` in ``after_train_iter`` (the
                loop counts an iteration once its hooks have run), ``runner.iter`` between
                phases.
        """
        with self._interim():
            self._save_checkpoint_with_step(runner, iterations,
                                            dict(epoch=runner.epoch, iter=iterations))

    @contextlib.contextmanager
    def _interim(self) -> Iterator[None]:
        self._saving_interim = True
        try:
            yield
        finally:
            self._saving_interim = False

    def _best_paths(self) -> dict[str, str | None]:
        if len(self.key_indicators) == 1:
            return {self.key_indicators[0]: self.best_ckpt_path}
        return dict(self.best_ckpt_path_dict)

    def _set_best_path(self, key: str, path: str | None) -> None:
        if len(self.key_indicators) == 1:
            self.best_ckpt_path = path
        else:
            self.best_ckpt_path_dict[key] = path

    def _save_best_checkpoint(self, runner, metrics: dict) -> None:
        if not self.save_best:
            return
        if 'auto' in self.key_indicators:
            # MMEngine's own resolution (the first metric), done first: the checks and paths
            # below read the key ('auto' failed them with KeyError at the first validation).
            self._init_rule(self.rules, [next(iter(metrics))])
        check_best_keys(self.key_indicators, metrics)
        for key in self.key_indicators:
            if isinstance(metrics[key], numbers.Real) and math.isnan(metrics[key]):
                # MMEngine compares it False with every best and says nothing.
                runner.logger.warning(f'save_best {key!r} is NaN at iteration {runner.iter}; '
                                      'this validation cannot be the best')
        previous = self._best_paths()
        # MMEngine removes the known best before writing its successor: hide it until then.
        for key in previous:
            self._set_best_path(key, None)
        self._replaced_best = previous
        try:
            # MMEngine saves the iteration of a new best again, to record the best in the run's
            # latest checkpoint: an interim one where no periodic checkpoint has this iteration.
            with self._interim():
                super()._save_best_checkpoint(runner, metrics)
        finally:
            self._replaced_best = {}
            for key, old in previous.items():
                new = self._best_paths()[key]
                if new is None or not self.file_backend.isfile(new):
                    self._set_best_path(key, old)
                elif old is not None and old != new and self._ours(old):
                    self._remove(old)
                    runner.logger.info(f'The previous best checkpoint {old} is removed')
                if new is not None and self.file_backend.isfile(new):
                    self._replace_earlier_best(runner, key, Path(new))

    def _outdated_best(self) -> list[str]:
        """The best checkpoints of this run that the new bests being saved replace (removed
        once the save recording them is in place)."""
        return [old for key, old in self._replaced_best.items()
                if old is not None and self._best_paths()[key] not in (None, old)
                and self._ours(old)]

    def _remove_outdated(self, runner) -> None:
        """Remove the checkpoints the resumed checkpoint's save made outdated
        (:data:`OUTDATED_KEY`) that are still there: a kill came before their removal, and no
        later save of this run names them (files of a moved work dir are its own)."""
        for recorded in runner.message_hub.get_info(OUTDATED_KEY) or []:
            path = recorded if self._ours(recorded) else own_file(self.out_dir, recorded)
            if path is not None and self.file_backend.isfile(path) and is_main_process():
                self._remove(path)
                runner.logger.info(f'removed {path}, which the checkpoint this run resumes from '
                                   'replaced (the run was stopped before removing it)')
        runner.message_hub.update_info(OUTDATED_KEY, [])

    def _replace_earlier_best(self, runner, key: str, new: Path) -> None:
        """Remove the earlier run's best checkpoints of ``key``, now that this run saved its
        own, ``new``."""
        of_key = [path for path in self._earlier_best if self._is_best_of(key, path.name)]
        self._earlier_best = [path for path in self._earlier_best if path not in of_key]
        replaced = [path for path in of_key if path.resolve() != new.resolve()]
        for path in replaced:
            self._remove(str(path))
            runner.logger.info(f'{path.name}, the best checkpoint of a run stopped before its '
                               f'first checkpoint, is replaced by {new.name}')

    def _is_best_of(self, key: str, name: str) -> bool:
        """Whether ``name`` is MMEngine's name of a best checkpoint of ``key``:
        ``best_<key>_<filename_tmpl at some step>``, ``/`` read as ``_`` (so the best of ``R@1``
        is not taken for one of ``R@1_sum``)."""
        around_step = map(re.escape, re.split(r'\{[^{}]*\}', self.filename_tmpl))
        prefix = re.escape(f'best_{key}_'.replace('/', '_'))
        return re.fullmatch(prefix + r'\d+'.join(around_step), name) is not None

    def _ours(self, path: str) -> bool:
        """Whether ``path`` lies in this run's work dir (not in the one a fork resumed from)."""
        return Path(path).resolve().parent == Path(self.out_dir).resolve()

    def _remove(self, path: str) -> None:
        if is_main_process() and self.file_backend.isfile(path):
            self.file_backend.remove(path)


def check_best_keys(keys: list[str], metrics: Collection[str], expected: bool = False) -> None:
    """Refuse a ``save_best`` key the validation did not report, or, with ``expected``, will
    not report (MMEngine: a bare KeyError, at the first validation).

    Raises:
        UserKeyError: naming the key, the nearest metric and the ones reported.
    """
    check_metric_names([('default_hooks.checkpoint.save_best', key) for key in keys
                        if key != 'auto'], metrics, expected)


def check_metric_names(named: Sequence[tuple[str, str]], metrics: Collection[str],
                       expected: bool = False) -> None:
    """Refuse a metric name the validation did not report, or, with ``expected``, will not
    report (:func:`~xmr.engine.eval_loops.expected_metric_keys`, before training: else the
    name is refused at the first validation, a phase in).

    Args:
        named: ``(option, the metric name it gives)`` pairs, e.g.
            ``[('default_hooks.checkpoint.save_best', 'mAR')]``.
        metrics: the keys the validation reported, or will report.
        expected: whether ``metrics`` are the keys it will report.

    Raises:
        UserKeyError: naming the option, its name, the nearest metric and the ones reported.
    """
    reported = 'will report' if expected else 'reported'
    for option, key in named:
        if key not in metrics:
            # The summaries (mAR, rSum, coco/mAR) before the per-language keys (en/AR).
            shown = sorted(metrics, key=lambda name: (name.count('/'), name))
            listed = ', '.join(shown[:8]) + (f', ... ({len(shown)} in all)'
                                             if len(shown) > 8 else '')
            raise UserKeyError(f'{option}={key!r}: the validation {reported} no such metric'
                               f'{did_you_mean(key, metrics)}; it {reported} {listed}: name one '
                               'of them')


def refuse_foreign_weights(path: str | None, model_state: dict, checkpoint: dict) -> None:
    """Refuse a ``load_from`` checkpoint that holds no weight of the model
    (:func:`~xmr.engine.checkpoint.keys_of_another_model`): MMEngine's lenient loading lists
    every key as missing and trains from the random weights.

    Raises:
        ValueError: naming the file, some of its keys and the model's.
    """
    # The language modules read their files through xmr.engine: imported here, not at the top.
    from xmr.models.language.language_modules import module_file_problem

    module_file = module_file_problem(path, checkpoint)
    if module_file is not None:
        raise ValueError(f'load_from={module_file}')
    state = checkpoint.get('state_dict', checkpoint)
    if not isinstance(state, dict):
        return
    foreign = keys_of_another_model(state, model_state)
    if foreign is not None:
        raise ValueError(f'load_from={path}: none of its {len(state)} entries is a weight of '
                         f'this model ({foreign}): '
                         f'{foreign_checkpoint_fix(path, state, model_state)}; or load_from=None')


def refuse_other_facts(model: nn.Module, state: Mapping[str, Any], where: str,
                       fix: str) -> None:
    """Refuse a checkpoint whose recorded facts (backbone, width, languages, ...) differ from
    the model's, naming the file: the retriever's own check fails inside MMEngine's load and
    names neither. A checkpoint without facts is left to the weights' check.

    Args:
        model: the unwrapped model.
        state: the checkpoint's state dict, ``module.`` prefixes stripped.
        where: the file as the run took it, e.g. ``load_from=PATH``.
        fix: what to do instead.

    Raises:
        ValueError: ``<where>: checkpoint does not match the config: <fact>: checkpoint ..
            vs config ... <fix>``.
    """
    if not hasattr(model, 'checkpoint_facts') or FACTS not in state:
        return
    try:
        check_checkpoint_facts(decode_facts(state[FACTS]), model.checkpoint_facts())
    except ValueError as error:
        raise ValueError(f'{where}: {error}. {fix}') from error
