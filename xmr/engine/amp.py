"""Mixed precision on CPU and CUDA: bf16 where the device supports it, else fp16 + loss scaling."""
from __future__ import annotations

import inspect
import logging
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from mmengine.logging import print_log
from mmengine.optim import AmpOptimWrapper as MMEngineAmpOptimWrapper

from xmr.engine.frozen_casts import FrozenWeightCasts
from xmr.engine.optim_wrapper import BuiltSettingsKept, OptimWrapper, PhaseWindowCounts
from xmr.registry import OPTIM_WRAPPERS

#: Autocast precisions a config may ask for (``None``: the device's best).
AMP_DTYPES = (None, 'bfloat16', 'float16')


def amp_dtype(device_type: str) -> torch.dtype:
    """bf16 on CPU and on GPUs that support it (Ampere and newer), fp16 on older GPUs."""
    # Without including_emulation=False, torch says yes on sm_7x (T4, V100), where bf16 is
    # emulated in fp32 kernels: slower than fp16, and cuDNN has no bf16 engines there.
    if device_type == 'cuda' and not torch.cuda.is_bf16_supported(including_emulation=False):
        return torch.float16
    return torch.bfloat16


@OPTIM_WRAPPERS.register_module()
class AutocastOptimWrapper(OptimWrapper):
    """An optimiser wrapper whose forward passes run under ``torch.autocast``.

    MMEngine's ``AmpOptimWrapper`` refuses CPUs; this one picks the device from the model's
    parameters at the first step, autocasts to bf16 there (fp16 on GPUs without bf16, or when
    asked), and keeps parameters and optimiser state in fp32. fp16 always comes with a dynamic
    ``GradScaler``: the loss is scaled before backward, gradients are unscaled before clipping,
    and a step whose gradients overflowed is skipped.

    Args:
        dtype: ``'bfloat16'``, ``'float16'`` or ``None`` (choose per device).
        loss_scale: ``torch.amp.GradScaler`` arguments for fp16 (``init_scale``,
            ``growth_interval``, ...); the default starts at 2^16 and skips the first steps
            while the scale settles.
        cast_frozen_weights: cast the frozen weights once and keep the copies
            (:class:`~xmr.engine.frozen_casts.FrozenWeightCasts`) rather than at every use, as
            autocast would; the same arithmetic, fewer kernels, half the frozen matrices' fp32
            memory more.
        **kwargs: :class:`mmengine.optim.OptimWrapper` arguments.
    """

    forwards_options_to = (OptimWrapper.__init__, *OptimWrapper.forwards_options_to)

    def __init__(self, dtype: str | None = None, loss_scale: dict | None = None,
                 cast_frozen_weights: bool = True, **kwargs: Any) -> None:
        if dtype not in AMP_DTYPES:
            raise ValueError(f"AutocastOptimWrapper dtype must be one of {AMP_DTYPES}, got "
                             f'{dtype!r}')
        _check_loss_scale(loss_scale)
        super().__init__(**kwargs)
        self.requested_dtype = getattr(torch, dtype) if dtype else None
        self.loss_scale = dict(loss_scale or {})
        self.scaler: torch.amp.GradScaler | None = None
        self._device_type: str | None = None
        self.cast_frozen_weights = cast_frozen_weights
        self.frozen_casts = FrozenWeightCasts()
        # fp16's loss scale when last read: (the scaler's scale tensor, its version, the value).
        self._read_scale: tuple[torch.Tensor, int, float] | None = None
        self._refuse_compiled_step_with_scaler(self.requested_dtype)

    def _refuse_compiled_step_with_scaler(self, dtype: torch.dtype | None) -> None:
        if dtype == torch.float16 and self.compiled_step is not None:
            raise ValueError("optim_wrapper.compiled_step cannot compile fp16's loss-scaled step "
                             "(the scaler reads the gradients' finiteness on the host): use "
                             "dtype='bfloat16', or drop compiled_step")

    def _resolve(self) -> tuple[str, torch.dtype]:
        if self._device_type is None:
            first = next(p for group in self.optimizer.param_groups for p in group['params'])
            self._device_type = first.device.type
            dtype = self.requested_dtype or amp_dtype(self._device_type)
            self.requested_dtype = dtype
            if dtype == torch.float16:
                self._refuse_compiled_step_with_scaler(dtype)
                # fp16's narrow exponent range underflows small gradients; bf16 needs no scaler.
                self.scaler = torch.amp.GradScaler(self._device_type, **self.loss_scale)
            elif self.loss_scale:
                print_log(f'optim_wrapper.loss_scale={self.loss_scale} is unused: {dtype} '
                          'autocast needs no loss scaling (only float16 has it)',
                          logger='current', level=logging.WARNING)
            _log_precision(self._device_type, dtype, self.scaler is not None)
        return self._device_type, self.requested_dtype

    @contextmanager
    def optim_context(self, model: torch.nn.Module):
        device_type, dtype = self._resolve()
        # Entered after autocast, whose dtype it reads.
        casts = self.frozen_casts.swapped_into(model) if self.cast_frozen_weights else nullcontext()
        with super().optim_context(model), torch.autocast(device_type, dtype=dtype), casts:
            yield

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        super().backward(loss if self.scaler is None else self.scaler.scale(loss), **kwargs)

    def step(self, **kwargs: Any) -> None:
        if self.scaler is None:
            super().step(**kwargs)
            return
        if self.clip_grad_kwargs:
            self.scaler.unscale_(self.optimizer)
            self._clip_grad()
        scale = self._loss_scale()
        self.scaler.step(self.optimizer, **kwargs)
        self.scaler.update()
        if self._loss_scale() < scale:  # the scaler backs off exactly when it skips
            print_log(f'fp16: optimiser step skipped (gradients overflowed at loss scale '
                      f'{scale:g}); the loss scale is now {self._loss_scale():g}',
                      logger='current')

    def _loss_scale(self) -> float:
        """fp16's loss scale, read from the device only when it changed since the last read
        (its version moved: an update, a loaded state). A step reads it once, after its update:
        read before the optimiser's step too, it made the host wait for the backward before
        queueing that step, and the device then idled while the host queued it."""
        scale = self.scaler._get_scale_async()
        held = self._read_scale
        if scale is not None and held is not None and held[0] is scale \
                and held[1] == scale._version:
            return held[2]
        value = self.scaler.get_scale()
        if scale is not None:
            self._read_scale = (scale, scale._version, value)
        return value

    @property
    def skips_nonfinite_steps(self) -> bool:
        """As the base's, and always in fp16, whose loss scaler skips a step whose gradients
        overflowed (the precision chosen from the parameters' device when first asked)."""
        return self._resolve()[1] == torch.float16 or self._fused_step_skips()

    def log_pending_norm(self, log: bool = True) -> None:
        """The base's logging, except that an fp16 step the scaler skipped (non-finite
        gradients, said by :meth:`step`) logs nothing: one ``inf`` would make the whole log
        window's mean ``inf``."""
        norm = self.pending_norm
        if self.scaler is not None and norm is not None and not torch.isfinite(norm):
            self.pending_norm = None
            return
        super().log_pending_norm(log)

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.scaler is not None:
            state['loss_scaler'] = self.scaler.state_dict()
        return state

    def _load_loss_scaler(self, scaler_state: dict | None) -> None:
        """Load fp16's loss scale into this run's scaler; one this run has no use for (bf16) is
        dropped, saying so."""
        if scaler_state is not None:
            self._resolve()
            if self.scaler is not None:
                self.scaler.load_state_dict(scaler_state)
                return
        super()._load_loss_scaler(scaler_state)

    def _window_grad_scale(self) -> float:
        """fp16's loss scale (the precision chosen now, where no step has chosen it yet: a
        resumed window's gradients must be scaled as its remaining backward passes will be);
        1 under bf16."""
        self._resolve()
        return 1.0 if self.scaler is None else self._loss_scale()


def _check_loss_scale(loss_scale: Any) -> None:
    """``loss_scale`` is ``None`` or a dict of ``torch.amp.GradScaler`` arguments, checked when
    the wrapper is built rather than by the scaler at the first fp16 step.

    Raises:
        ValueError: MMEngine's ``'dynamic'`` or a number, or a key GradScaler does not take.
    """
    if loss_scale is None:
        return
    takes = [name for name in inspect.signature(torch.amp.GradScaler).parameters
             if name != 'device']
    if not isinstance(loss_scale, dict):
        raise ValueError(f'optim_wrapper.loss_scale={loss_scale!r} must be a dict of '
                         f'torch.amp.GradScaler arguments ({", ".join(takes)}), or None for '
                         'its dynamic scaling from 2^16 (what MMEngine calls "dynamic")')
    unknown = sorted(set(loss_scale) - set(takes))
    if unknown:
        raise ValueError(f'optim_wrapper.loss_scale: torch.amp.GradScaler takes no {unknown}; '
                         f'it takes {", ".join(takes)}')


def _log_precision(device_type: str, dtype: torch.dtype, scaled: bool) -> None:
    """Say which autocast precision runs, and that on a CPU it costs time instead of saving it."""
    message = (f'mixed precision: autocast to {str(dtype).removeprefix("torch.")} on '
               f'{device_type}' + (' with dynamic loss scaling' if scaled else ''))
    if device_type == 'cpu':
        # CPUs without bf16 matrix units (most) gain nothing and pay a cast around every matmul.
        print_log(f'{message}; on a CPU this is slower than fp32 (casts around every matmul, '
                  'no bf16 units on most CPUs): drop --amp unless you measured a gain',
                  logger='current', level=logging.WARNING)
    else:
        print_log(message, logger='current')


@OPTIM_WRAPPERS.register_module()
class AmpOptimWrapper(PhaseWindowCounts, BuiltSettingsKept, MMEngineAmpOptimWrapper):
    """MMEngine's ``AmpOptimWrapper`` (GPUs alone), whose accumulation windows count within
    each phase as :class:`AutocastOptimWrapper`'s do, without MMEngine's warning at a resume
    that counted the run's iterations, and whose resume keeps the config's optimiser settings
    (:class:`~xmr.engine.optim_wrapper.BuiltSettingsKept`). Its checkpoints hold no window's
    gradients (``optimizer.pending_grads``): a run resumed inside a window is told so by the
    loop.
    """


def enable_amp(cfg: Any, dtype: str | None = None) -> None:
    """Switch a config's ``optim_wrapper`` to :class:`AutocastOptimWrapper` (``--amp``).

    Args:
        cfg: the run's config.
        dtype: ``'bfloat16'`` or ``'float16'`` to force a precision; ``None`` keeps the
            config's choice, else the device's best (bf16, fp16 on GPUs without bf16).
    """
    wrapper = cfg.optim_wrapper
    if wrapper.get('type', 'OptimWrapper') not in ('OptimWrapper', 'AutocastOptimWrapper'):
        raise ValueError(f"--amp cannot wrap optim_wrapper type {wrapper['type']}")
    if dtype not in AMP_DTYPES:
        raise ValueError(f'--amp dtype must be one of {AMP_DTYPES}, got {dtype!r}')
    wrapper['type'] = 'AutocastOptimWrapper'
    if dtype is not None:
        wrapper['dtype'] = dtype
