"""Lower-precision copies of a model's frozen weights, cast once and used under autocast.

Autocast runs a matrix product (``linear``, ``conv``, ``matmul``) in bf16 / fp16 by casting its
fp32 operands at every call. It keeps the cast of a weight for the rest of the autocast region
only when the weight requires grad (it caches the trained weights); a frozen weight is cast
again at every use, though it never changes. xmr's frozen towers are nearly all of a model's
weights, so on a GPU those casts were about 1,500 extra kernels in each DASD step
(docs/benchmarks.md). :class:`FrozenWeightCasts` casts each frozen weight of a module that
autocast runs in lower precision once, keeps the copy while the weight is unchanged, and swaps
the copies in for the forward; autocast then finds them in its dtype already. The arithmetic is
exactly autocast's (the same rounding of the same weights), at the cost of holding the copies:
half (bf16, fp16) of those frozen weights' fp32 memory.
"""
from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn.modules.module import (
    register_module_module_registration_hook,
    register_module_parameter_registration_hook,
)

from xmr.models.swapped_parameters import swapped_parameters

#: Modules whose weights only ever meet autocast's lower-precision ops (their ``forward`` is a
#: ``linear`` / ``conv``; xmr's towers read attention's ``in_proj_*`` through ``linear`` too).
#: Norms and embeddings run in fp32 or the weight's own dtype under autocast, so their weights
#: stay as they are.
AUTOCAST_MODULES = (nn.Linear, nn.MultiheadAttention, nn.modules.conv._ConvNd)


class _Registrations:
    """How many submodules and parameters any module of the process has registered (assigned
    as attributes, ``add_module``, ``register_parameter``): a model whose count is unchanged
    since it was walked has the same module tree."""

    count = 0

    @classmethod
    def note(cls, *_: object) -> None:
        cls.count += 1


register_module_module_registration_hook(_Registrations.note)
register_module_parameter_registration_hook(_Registrations.note)


class FrozenWeightCasts:
    """Copies of the frozen ``AUTOCAST_MODULES`` weights of a model in an autocast dtype.

    A copy is made again when its weight changes (its version counter moves: an in-place
    update, ``load_state_dict``), or when the dtype or the device does. Weights that require
    grad are left to autocast, which caches their casts itself.
    """

    def __init__(self) -> None:
        # id(weight) -> (weight, its version when cast, the copy)
        self._copies: dict[int, tuple[torch.Tensor, int, torch.Tensor]] = {}
        # The model last walked, the registration count then, and its (module, parameter name)
        # of every AUTOCAST_MODULES parameter, in model.modules() order.
        self._walked: tuple[weakref.ref, int, list[tuple[nn.Module, str]]] | None = None

    def _copy(self, weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        held = self._copies.get(id(weight))
        if (held is not None and held[0] is weight and held[1] == weight._version
                and held[2].dtype == dtype and held[2].device == weight.device):
            return held[2]
        copy = weight.detach().to(dtype)
        self._copies[id(weight)] = (weight, weight._version, copy)
        return copy

    def _cast_sites(self, model: nn.Module) -> list[tuple[nn.Module, str]]:
        """``(module, parameter name)`` of each parameter of ``model``'s ``AUTOCAST_MODULES``.

        Walked again only for another model (a DDP re-wrap is one) or after a module or
        parameter was registered anywhere in the process: :meth:`swapped_into` runs at every
        step, and walking DASD's 475 modules at ViT-B/32 was half its host time (0.6 to 0.7 ms
        of CPU time a call on the development CPU, 0.3 ms without the walk). A module put in
        by writing ``_modules`` directly, which registers nothing, keeps the casts autocast
        makes at each use (the same values) until the next walk.
        """
        walked = self._walked
        if walked is None or walked[0]() is not model or walked[1] != _Registrations.count:
            sites = [(module, leaf) for module in model.modules()
                     if isinstance(module, AUTOCAST_MODULES) for leaf in module._parameters]
            walked = self._walked = (weakref.ref(model), _Registrations.count, sites)
        return walked[2]

    @contextmanager
    def swapped_into(self, model: nn.Module) -> Iterator[None]:
        """Let ``model`` run on the copies of its frozen weights in the dtype autocast has
        where each weight lies, until the block exits (even by an exception); the weights
        themselves are untouched. Outside autocast, nothing is swapped."""
        dtypes: dict[str, torch.dtype | None] = {}
        copies = []
        for module, leaf in self._cast_sites(model):
            # Read at every call: a phase unfreezes weights, a load may replace them.
            weight = module._parameters.get(leaf)
            if weight is None or weight.requires_grad or not weight.is_floating_point():
                continue
            device = weight.device.type
            if device not in dtypes:
                dtypes[device] = (torch.get_autocast_dtype(device)
                                  if torch.is_autocast_enabled(device) else None)
            if dtypes[device] not in (None, weight.dtype):
                copies.append((module, leaf, weight, self._copy(weight, dtypes[device])))
        # Copies of weights the model no longer has (or no longer freezes) are let go.
        self._copies = {id(weight): self._copies[id(weight)] for _, _, weight, _ in copies}
        with swapped_parameters((module, leaf, copy) for module, leaf, _, copy in copies):
            yield
