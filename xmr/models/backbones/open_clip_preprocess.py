"""Image preprocessing settings of an open_clip backbone, read without downloading anything.

open_clip keeps the input size in the model config and the normalisation (mean, std), the
interpolation and the resize mode in the pretrained tag's record. Both are merged once, by
:func:`~xmr.models.backbones.open_clip_pretrained.record_for`, for the model and the data alike.
The dataset uses size, interpolation and resize mode (it delivers uint8 media); the model's data
preprocessor uses :func:`backbone_mean_std`.
"""
from __future__ import annotations

from typing import Any

from xmr.models.backbones.open_clip_pretrained import record_for

__all__ = ['backbone_preprocess_cfg', 'backbone_mean_std']


def backbone_preprocess_cfg(model_name: str, pretrained: str | None = None,
                            pretrained_cfg: str | dict | None = None) -> dict[str, Any]:
    """The image preprocessing open_clip records for ``model_name`` and its weights.

    Args:
        model_name: an open_clip model name, e.g. ``ViT-B-32``.
        pretrained: a pretrained tag of that model (``openai``, ``laion2b_s34b_b79k``), a local
            checkpoint path (then ``pretrained_cfg`` names its settings), or ``None`` for the
            architecture's own settings.
        pretrained_cfg: the tag (or dict of settings) a local checkpoint was trained with.

    Returns:
        ``dict(size=(H, W), mean=(3,), std=(3,), interpolation=str, resize_mode=str,
        fill_color=int)``.

    Raises:
        ValueError: an unknown model or tag (with the known ones), or a checkpoint path without
            ``pretrained_cfg``.
    """
    cfg = record_for(model_name, pretrained, pretrained_cfg).preprocess_cfg()
    del cfg['mode']
    return cfg


def backbone_mean_std(model_name: str, pretrained: str | None = None,
                      pretrained_cfg: str | dict | None = None,
                      ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(mean, std)`` per RGB channel in ``[0, 1]`` units for the model's data preprocessor.

    Multiply by 255 to normalise uint8 media: ``(x - 255 * mean) / (255 * std)``.
    """
    cfg = backbone_preprocess_cfg(model_name, pretrained, pretrained_cfg)
    return cfg['mean'], cfg['std']
