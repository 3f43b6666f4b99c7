"""Image preprocessing settings of an open_clip backbone, read without downloading anything.

open_clip keeps the input size in the model config and the normalisation (mean, std), the
interpolation and the resize mode in the pretrained tag's config. :func:`backbone_preprocess_cfg`
merges both the way ``open_clip.create_model`` does. The dataset uses size, interpolation and
resize mode (it delivers uint8 media); the model's data preprocessor uses :func:`backbone_mean_std`.
"""
from __future__ import annotations

import difflib
from typing import Any

import open_clip
from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

__all__ = ['backbone_preprocess_cfg', 'backbone_mean_std']

_DEFAULTS: dict[str, Any] = {
    'size': 224, 'mean': tuple(OPENAI_DATASET_MEAN), 'std': tuple(OPENAI_DATASET_STD),
    'interpolation': 'bicubic', 'resize_mode': 'shortest', 'fill_color': 0,
}
_KEYS = tuple(_DEFAULTS)


def backbone_preprocess_cfg(model_name: str, pretrained: str | None = None) -> dict[str, Any]:
    """The image preprocessing open_clip applies for ``model_name`` and its pretrained tag.

    Args:
        model_name: an open_clip model name, e.g. ``ViT-B-32``.
        pretrained: a pretrained tag of that model (``openai``, ``laion2b_s34b_b79k``), or
            ``None``/a checkpoint path, which keeps the model config's values and OpenAI's
            normalisation (open_clip's own defaults).

    Returns:
        ``dict(size=int | (H, W), mean=(3,), std=(3,), interpolation=str, resize_mode=str,
        fill_color=int)``.

    Raises:
        KeyError: if open_clip does not know ``model_name`` (with the closest names) or the
            tag (with the model's tags).
    """
    model_cfg = open_clip.get_model_config(model_name)
    if model_cfg is None:
        names = open_clip.list_models()
        close = difflib.get_close_matches(model_name, names, n=5)
        raise KeyError(f'open_clip has no model config {model_name!r}'
                       + (f'; closest: {", ".join(close)}' if close else '')
                       + '. For other towers pass size (and mean/std) explicitly.')
    cfg = dict(_DEFAULTS)
    vision_size = model_cfg.get('vision_cfg', {}).get('image_size')
    if vision_size is not None:
        cfg['size'] = vision_size
    cfg.update({k: v for k, v in model_cfg.get('preprocess_cfg', {}).items() if k in _KEYS})
    if pretrained and not _is_checkpoint_path(pretrained):
        tag_cfg = open_clip.get_pretrained_cfg(model_name, pretrained)
        if not tag_cfg:
            tags = open_clip.list_pretrained_tags_by_model(model_name)
            raise KeyError(f'open_clip has no pretrained tag {pretrained!r} for {model_name}; '
                           f'known tags: {", ".join(tags) or "none"} (or pass a checkpoint path)')
        cfg.update({k: v for k, v in tag_cfg.items() if k in _KEYS and v is not None})
    if isinstance(cfg['size'], list):
        cfg['size'] = tuple(cfg['size'])
    cfg['mean'], cfg['std'] = tuple(cfg['mean']), tuple(cfg['std'])
    return cfg


def _is_checkpoint_path(pretrained: str) -> bool:
    return '/' in pretrained or pretrained.endswith(('.pt', '.pth', '.bin', '.safetensors'))


def backbone_mean_std(model_name: str, pretrained: str | None = None,
                      ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(mean, std)`` per RGB channel in ``[0, 1]`` units for the model's data preprocessor.

    Multiply by 255 to normalise uint8 media: ``(x - 255 * mean) / (255 * std)``.
    """
    cfg = backbone_preprocess_cfg(model_name, pretrained)
    return cfg['mean'], cfg['std']
