"""MMEngine's optimiser wrapper, without its wait for the device in the middle of a step."""
from __future__ import annotations

import torch
from mmengine.optim import OptimWrapper as MMEngineOptimWrapper

from xmr.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module()
class OptimWrapper(MMEngineOptimWrapper):
    """MMEngine's ``OptimWrapper`` whose clipping leaves the gradients' norm on the device.

    MMEngine logs the clipped gradients' total norm as ``float(norm)`` inside ``step``: on a GPU
    the host waits there for the backward before it launches the optimiser's step, and the
    device then idles while the host runs that step. Here the norm is kept as
    :attr:`pending_norm` and logged by :meth:`log_pending_norm`, which
    :class:`~xmr.engine.loops.PhasedTrainLoop` calls once the iteration's losses are read (the
    step's one wait) and before the iteration's hooks run, so the log's history is MMEngine's.
    Used without that loop, call :meth:`log_pending_norm` after ``update_params``.
    """

    #: The total norm of the last clipped gradients, until :meth:`log_pending_norm` takes it.
    pending_norm: torch.Tensor | None = None

    def _clip_grad(self) -> None:
        params = [p for group in self.optimizer.param_groups for p in group['params']
                  if p.requires_grad and p.grad is not None]
        if params:
            # torch.nn.utils.clip_grad_value_ returns None: nothing to log.
            self.pending_norm = self.clip_func(params, **self.clip_grad_kwargs)

    def log_pending_norm(self, log: bool = True) -> None:
        """Take :attr:`pending_norm` and, with ``log``, log it as ``train/grad_norm`` (reading
        it waits for the backward that made it). ``log=False`` drops it: the loop's iteration
        with a non-finite loss reaches no hook, and logs no norm either."""
        norm, self.pending_norm = self.pending_norm, None
        if log and norm is not None:
            self.message_hub.update_scalar(f'train/{self.grad_name}', float(norm))
