"""open_clip's geometric preprocessing on uint8 tensors, for images and video frames alike.

Datasets deliver media resized and cropped to the backbone's input size but still uint8; the
model's data preprocessor normalises them (mean/std from :func:`backbone_mean_std`). Evaluation
follows open_clip's ``image_transform(is_train=False)``: ``shortest`` resizes the short side to the
input size and centre-crops, ``longest`` resizes the long side and pads, ``squash`` resizes to the
size ignoring the aspect ratio. Training adds configurable augmentations. A video ``[T, 3, H, W]``
goes through one call, so every frame of a clip gets the same crop and flip.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torchvision.transforms import InterpolationMode, RandomResizedCrop
from torchvision.transforms.v2 import functional as F

from xmr.models.backbones.open_clip_preprocess import backbone_preprocess_cfg
from xmr.models.backbones.open_clip_pretrained import INTERPOLATIONS, RESIZE_MODES
from xmr.registry import TRANSFORMS

__all__ = ['MediaTransform']

_INTERPOLATIONS = {name: InterpolationMode(name) for name in INTERPOLATIONS}


@TRANSFORMS.register_module()
class MediaTransform:
    """Resize and crop uint8 media to a backbone's input size, with optional train augmentation.

    Args:
        backbone: open_clip model name whose preprocessing to follow (e.g. ``ViT-B-32``), or
            ``None`` for other towers (then give ``size`` and the rest).
        pretrained: the backbone's pretrained tag (``openai``) or local checkpoint path, exactly
            as the model config names it; its record decides size, resize mode, interpolation.
        pretrained_cfg: with a local checkpoint, the tag (or dict) its settings come from, as
            the model config names it.
        size: input size ``S`` or ``(H, W)`` of a tower that is not open_clip's. With a
            ``backbone`` this and the three below may only repeat the record's values.
        resize_mode: ``shortest`` | ``longest`` | ``squash``.
        interpolation: ``bicubic`` | ``bilinear``.
        fill_color: padding value of the ``longest`` mode.
        training: apply the augmentations below (the dataset sets it from ``test_mode``).
        random_resized_crop: ``dict(scale=(lo, hi), ratio=(lo, hi))`` replaces resize + crop by a
            random resized crop when training (open_clip trains with ``scale=(0.9, 1.0)``);
            ``None`` keeps the evaluation geometry.
        hflip_prob: probability of a horizontal flip when training. The augmentations draw
            from torch's stream, which a dataset seeds per item
            (:func:`~xmr.datasets.sample_keys.sample_draws`).

    Call:
        ``media``: uint8 ``[3, H, W]`` image or ``[T, 3, H, W]`` frames.

    Returns:
        uint8 ``[3, S_h, S_w]`` or ``[T, 3, S_h, S_w]``.
    """

    def __init__(self, backbone: str | None = 'ViT-B-32', pretrained: str | None = 'openai',
                 pretrained_cfg: str | dict | None = None,
                 size: int | Sequence[int] | None = None, resize_mode: str | None = None,
                 interpolation: str | None = None, fill_color: int | None = None,
                 training: bool = False, random_resized_crop: dict[str, Any] | None = None,
                 hflip_prob: float = 0.0) -> None:
        given = dict(size=size, resize_mode=resize_mode, interpolation=interpolation,
                     fill_color=fill_color)
        given = {key: value for key, value in given.items() if value is not None}
        if backbone:
            cfg = backbone_preprocess_cfg(backbone, pretrained, pretrained_cfg)
            _refuse_departures(given, cfg, f'{backbone} ({pretrained or "no weights"})')
        else:
            cfg = {'resize_mode': 'shortest', 'interpolation': 'bicubic', 'fill_color': 0,
                   **given}
        if 'size' not in cfg:
            raise ValueError('MediaTransform needs a backbone or an explicit size')
        raw_size = cfg['size']
        self.size = ((int(raw_size), int(raw_size)) if isinstance(raw_size, int)
                     else tuple(int(s) for s in raw_size))
        if len(self.size) != 2 or min(self.size) <= 0:
            raise ValueError(f'size must be a positive int or (H, W), got {raw_size!r}')
        if cfg['resize_mode'] not in RESIZE_MODES:
            raise ValueError(f'resize_mode must be one of {RESIZE_MODES}, got '
                             f'{cfg["resize_mode"]!r}')
        if cfg['interpolation'] not in _INTERPOLATIONS:
            raise ValueError(f'interpolation must be one of {tuple(_INTERPOLATIONS)}, got '
                             f'{cfg["interpolation"]!r}')
        if not 0.0 <= hflip_prob <= 1.0:
            raise ValueError(f'hflip_prob must lie in [0, 1], got {hflip_prob}')
        self.resize_mode = cfg['resize_mode']
        self.interpolation = _INTERPOLATIONS[cfg['interpolation']]
        self.fill_color = int(cfg['fill_color'])
        self.training = training
        self.hflip_prob = hflip_prob
        self.random_resized_crop = None
        if random_resized_crop is not None:
            unknown = set(random_resized_crop) - {'scale', 'ratio'}
            if unknown:
                raise ValueError(f'random_resized_crop takes scale and ratio, got {unknown}')
            self.random_resized_crop = {
                'scale': tuple(random_resized_crop.get('scale', (0.9, 1.0))),
                'ratio': tuple(random_resized_crop.get('ratio', (3 / 4, 4 / 3)))}

    def __call__(self, media: torch.Tensor) -> torch.Tensor:
        if media.dtype != torch.uint8 or media.ndim not in (3, 4) or media.shape[-3] != 3:
            raise ValueError('MediaTransform expects uint8 [3, H, W] or [T, 3, H, W], got '
                             f'{media.dtype} {tuple(media.shape)}')
        if self.training and self.random_resized_crop is not None:
            top, left, height, width = RandomResizedCrop.get_params(
                media, list(self.random_resized_crop['scale']),
                list(self.random_resized_crop['ratio']))
            media = F.resized_crop(media, top, left, height, width, list(self.size),
                                   interpolation=self.interpolation, antialias=True)
        else:
            media = self._evaluation_geometry(media)
        if self.training and self.hflip_prob > 0 and torch.rand(()) < self.hflip_prob:
            media = F.horizontal_flip(media)
        return media.contiguous()

    def _evaluation_geometry(self, media: torch.Tensor) -> torch.Tensor:
        target_h, target_w = self.size
        height, width = media.shape[-2:]
        if self.resize_mode == 'squash':
            return F.resize(media, [target_h, target_w], interpolation=self.interpolation,
                            antialias=True)
        if self.resize_mode == 'shortest':
            if target_h == target_w:
                # An int size is torchvision's "short side" rule, the one open_clip uses.
                media = F.resize(media, target_h, interpolation=self.interpolation,
                                 antialias=True)
            else:
                scale = max(target_h / height, target_w / width)
                media = F.resize(media, [max(target_h, round(height * scale)),
                                         max(target_w, round(width * scale))],
                                 interpolation=self.interpolation, antialias=True)
            return F.center_crop(media, [target_h, target_w])
        # open_clip's ResizeKeepRatio: Python's round of size / ratio, a tie to the even side.
        ratio = max(height / target_h, width / target_w)
        new_h = min(target_h, max(1, round(height / ratio)))
        new_w = min(target_w, max(1, round(width / ratio)))
        media = F.resize(media, [new_h, new_w], interpolation=self.interpolation, antialias=True)
        pad_top, pad_left = (target_h - new_h) // 2, (target_w - new_w) // 2
        return F.pad(media, [pad_left, pad_top, target_w - new_w - pad_left,
                             target_h - new_h - pad_top], fill=self.fill_color)

    def __repr__(self) -> str:
        # A feature cache is keyed by this: the padding colour decides pixels of 'longest' only
        # (the other modes keep the key they had).
        fill = f', fill_color={self.fill_color}' if self.resize_mode == 'longest' else ''
        return (f'{type(self).__name__}(size={self.size}, resize_mode={self.resize_mode!r}'
                f'{fill}, interpolation={self.interpolation.value!r}, training={self.training}, '
                f'random_resized_crop={self.random_resized_crop}, hflip_prob={self.hflip_prob})')


def _refuse_departures(given: dict[str, Any], record: dict[str, Any], source: str) -> None:
    """A config value that contradicts the weights' record is an error, not an override."""
    for key, value in given.items():
        if key == 'size':
            value = (value, value) if isinstance(value, int) else tuple(value)
        if value != record[key]:
            raise ValueError(f'MediaTransform {key}: the config sets {given[key]!r}, the record '
                             f'of {source} says {record[key]!r}; leave {key} out (the backbone '
                             'decides) or set backbone=None for a tower open_clip does not '
                             'record')
