"""xmr's hook points beyond MMEngine's: methods a hook may define, called where it has them.

MMEngine's ``runner.call_hook(name)`` calls ``name`` on every hook and so needs every hook to
define it; a point of xmr's (``after_failed_train``, ``before_checkpoint_on_every_rank``) is
optional and reaches only the hooks that define it.
"""
from __future__ import annotations


def call_hook_point(runner, name: str) -> None:
    """``hook.<name>(runner)`` for each hook of ``runner`` that defines it, in priority order."""
    for hook in runner.hooks:
        method = getattr(hook, name, None)
        if method is not None:
            method(runner)
