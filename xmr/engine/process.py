"""What a tool does to its process once the config is loaded, before it builds anything.

``tools/train.py``, ``tools/test.py`` and ``tools/cache_features.py`` call
:func:`prepare_process` alone, so that the three set the same thread count, cuBLAS workspace
and distributed start-up in the same order.
"""
from __future__ import annotations

from typing import Any

from xmr.engine.determinism import prepare_deterministic_cuda
from xmr.engine.distributed import setup_cpu_distributed, start_distributed
from xmr.engine.threads import set_cpu_threads

__all__ = ['prepare_process']


def prepare_process(cfg: Any, launcher: str, *, start_group: bool = False) -> None:
    """Set torch's CPU threads (:func:`~xmr.engine.threads.set_cpu_threads`), cuBLAS's workspace
    for a deterministic run (:func:`~xmr.engine.determinism.prepare_deterministic_cuda`), then
    check ``launcher`` and set up the distributed run.

    The workspace comes before the process group: starting it puts the process on its GPU.

    Args:
        cfg: the run's config; its distributed settings may be changed (gloo on CPU).
        launcher: ``--launcher``.
        start_group: start the process group here (a tool that builds no runner:
            :func:`~xmr.engine.distributed.start_distributed`); otherwise the runner starts it
            and only a CPU run is set up (:func:`~xmr.engine.distributed.setup_cpu_distributed`).

    Raises:
        UserError: a thread count, cuBLAS workspace, launcher or timeout refused by the
            functions above, naming it.
    """
    set_cpu_threads(cfg)
    prepare_deterministic_cuda(cfg)
    (start_distributed if start_group else setup_cpu_distributed)(cfg, launcher)
