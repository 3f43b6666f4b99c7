"""The model inside a DDP / DataParallel wrapper, the one way xmr reaches it."""
from __future__ import annotations

from mmengine.model import is_model_wrapper
from torch import nn


def unwrap_model(model: nn.Module) -> nn.Module:
    """``model.module`` when ``model`` is one of MMEngine's registered wrappers (DDP,
    DataParallel, MMDistributedDataParallel), else ``model`` itself."""
    return model.module if is_model_wrapper(model) else model
