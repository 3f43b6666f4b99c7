"""MMEngine's optimiser wrapper, without its wait for the device in the middle of a step, and
with the backward optionally traced and compiled whole (compiled autograd)."""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from mmengine.dist import is_distributed
from mmengine.optim import OptimWrapper as MMEngineOptimWrapper

from xmr.engine.optim import HybridOptimizer
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

    With ``compiled_autograd``, each backward is traced by torch's compiled autograd and
    compiled by ``torch.compile`` with these options: the accumulation of every gradient into
    its parameter becomes part of one compiled graph (and of its CUDA graph under
    ``mode='reduce-overhead'``), where autograd's engine otherwise runs one ``AccumulateGrad``
    node per trained tensor on the host (240 in DASD's step at ViT-B/32). The arithmetic is
    the same; a new structure of the autograd graph (another phase's losses) is traced again.
    Runs without a launcher only: DDP's gradient hooks are not traced.

    Args:
        compiled_autograd: ``torch.compile`` options for the traced backward (``mode``,
            ``backend``, ...), or ``None`` for autograd's engine.
        **kwargs: :class:`mmengine.optim.OptimWrapper` arguments.
    """

    #: The total norm of the last clipped gradients, until :meth:`log_pending_norm` takes it.
    pending_norm: torch.Tensor | None = None

    def __init__(self, *args: Any, compiled_autograd: dict | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if compiled_autograd is not None and not isinstance(compiled_autograd, dict):
            raise ValueError('optim_wrapper.compiled_autograd must be a dict of torch.compile '
                             f'options (e.g. dict(mode="reduce-overhead")), got '
                             f'{compiled_autograd!r}')
        if compiled_autograd is not None and isinstance(self.optimizer, HybridOptimizer):
            raise ValueError('optim_wrapper.compiled_autograd cannot trace the sparse gradients '
                             "of an embedding table built with sparse=True; drop one of them")
        self.compiled_autograd = compiled_autograd
        self._backward_compiler = (None if compiled_autograd is None
                                   else torch.compile(**compiled_autograd))

    def backward_context(self) -> AbstractContextManager:
        """Where :meth:`backward` runs: compiled autograd's tracing with ``compiled_autograd``.

        Raises:
            RuntimeError: ``compiled_autograd`` in a distributed run (a launcher's, whose model
                DDP wraps even in one process).
        """
        if self._backward_compiler is None:
            return nullcontext()
        if is_distributed():
            raise RuntimeError('optim_wrapper.compiled_autograd traces no DDP gradient hook: '
                               'drop it for distributed runs')
        from torch._dynamo import compiled_autograd as tracer

        return tracer._enable(self._backward_compiler)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        with self.backward_context():
            loss.backward(**kwargs)
        self._inner_count += 1

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
