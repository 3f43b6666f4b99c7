"""CCLM (Cross-View Language Modeling, ACL 2023) as a frozen dual-stream backbone.

CCLM is a fusion model: a Swin-B image encoder, a 12-layer text encoder with the xlm-roberta-large
configuration whose layers 6-11 cross-attend to the image, and an ITM head on top. Used as a
dual-stream model (DASD Table 3) it keeps what encodes each modality alone:

* image: Swin-B (timm), ``r^V = vision_proj(mean of the final patch tokens)``, the token CCLM
  prepends to the patch sequence and projects;
* text: embeddings and the 6 text-only layers (post-LN BERT layers, positions ``0..L-1``),
  ``r^S = text_proj(x_CLS)``;

and drops the fusion layers and the heads. Both features are returned unnormalised; CCLM
L2-normalises them and divides their products by the temperature ``temp``, which it learns in
pre-training from 0.07 (the checkpoint holds the learnt value: :attr:`temperature`).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from mmengine.logging import print_log
from torch import nn

from xmr.models.backbones.base import (
    TokenOutput,
    TowerShape,
    VisionLanguageBackbone,
    check_tokenizer_fits,
)
from xmr.models.backbones.bert import BertTextTower, build_bert
from xmr.models.backbones.cclm_checkpoint import (
    CheckpointReport,
    convert_cclm_state_dict,
    read_cclm_checkpoint,
)
from xmr.models.backbones.relative_position import INTERPOLATION_MODES
from xmr.models.language.cclm_tokenizer import CCLMTokenizer
from xmr.models.language.tokenizers import BaseTokenizer, build_tokenizer
from xmr.registry import MODELS, with_defaults
from xmr.utils.cli import UserKeyError

__all__ = ['CCLMDualStream', 'CCLMTokenizer']

#: CCLM's Swin-B (``configs/config_swinB_384.json`` of the authors' code).
CCLM_VISION = dict(embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32), patch_size=4,
                   mlp_ratio=4.0)

#: The xlm-roberta-large configuration CCLM's text encoder is built from, cut to the 6
#: text-only layers of the 12 it keeps.
CCLM_TEXT = dict(hidden_size=1024, num_layers=6, num_heads=16, intermediate_size=4096,
                 vocab_size=250002, max_position_embeddings=514, type_vocab_size=1,
                 layer_norm_eps=1e-5, pad_token_id=1, hidden_act='gelu')

#: CCLM normalises images with CLIP's statistics (``dataset/__init__.py``), not ImageNet's.
CCLM_IMAGE_MEAN = (0.48145466, 0.4578275, 0.40821073)
CCLM_IMAGE_STD = (0.26862954, 0.26130258, 0.27577711)

CCLM_TEMPERATURE = 0.07


def _merge(defaults: dict, overrides: dict | None, what: str) -> dict:
    merged = dict(defaults)
    unknown = sorted(set(overrides or {}) - set(defaults))
    if unknown:
        raise UserKeyError(f'unknown CCLM {what} option(s) {unknown}; known: {sorted(defaults)}')
    merged.update(overrides or {})
    return merged


@MODELS.register_module()
class CCLMDualStream(VisionLanguageBackbone):
    """CCLM's image and text towers without the fusion encoder, frozen.

    Args:
        checkpoint: an official CCLM checkpoint file (pre-trained or retrieval fine-tuned), an
            already loaded state dict, or ``None`` for random weights (tests).
        image_size: input resolution; 384 is CCLM's retrieval setting, 224 its pre-training one.
        window_size: Swin window; defaults to ``image_size // 32`` (7 at 224, 12 at 384). Bias
            tables of a checkpoint trained with another window are resampled.
        vision: Swin options over :data:`CCLM_VISION` (``embed_dim``, ``depths``,
            ``num_heads``, ``patch_size``, ``mlp_ratio``).
        text: text encoder options over :data:`CCLM_TEXT`; ``num_layers`` text-only layers are
            kept (at most the index of the first fusion layer).
        embed_dim: width of ``vision_proj`` / ``text_proj`` (256).
        tokenizer: ``TOKENIZERS`` config or a built tokenizer; defaults to
            :class:`CCLMTokenizer` on the hub's ``xlm-roberta-large`` (pass ``tokenizer_file``
            for the offline JSON). With a ``checkpoint`` it must be a :class:`CCLMTokenizer`.
        bias_interpolation: ``'bicubic'`` or ``'geometric'`` (BEiT's scheme, CCLM's loader), see
            :func:`~xmr.models.backbones.relative_position.resize_relative_position_bias`.
        strict: refuse a checkpoint that leaves backbone weights missing or has unexplained keys.
        checkpoint_weights_only: load the file with torch's safe loader.
        freeze: freeze every weight.
    """

    # CCLM's test_transform (dataset/__init__.py) resizes the whole image to image_res x
    # image_res, bicubic: a centre crop would cut off what its retrieval scores saw.
    image_resize_mode = 'squash'

    def __init__(self, checkpoint: str | dict | None = None, image_size: int = 384,
                 window_size: int | None = None, vision: dict | None = None,
                 text: dict | None = None, embed_dim: int = 256,
                 tokenizer: dict | BaseTokenizer | None = None,
                 bias_interpolation: str = 'bicubic', strict: bool = True,
                 checkpoint_weights_only: bool = True, freeze: bool = True) -> None:
        super().__init__()
        from timm.models.swin_transformer import SwinTransformer

        if isinstance(checkpoint, (str, Path)) and not Path(checkpoint).is_file():
            # Before anything slow or networked (the tokenizer), so a fresh machine hears this.
            raise FileNotFoundError(
                f'CCLM checkpoint {checkpoint} does not exist; download CCLM (see '
                'docs/methods/cclm.md) and set model.backbone.checkpoint=PATH')
        if bias_interpolation not in INTERPOLATION_MODES:
            raise ValueError(f"unknown bias_interpolation '{bias_interpolation}'; choose one of "
                             f'{INTERPOLATION_MODES}')
        vision = _merge(CCLM_VISION, vision, 'vision')
        text = _merge(CCLM_TEXT, text, 'text')
        self.window_size = image_size // 32 if window_size is None else window_size
        self.bias_interpolation = bias_interpolation
        self.vision = SwinTransformer(
            img_size=image_size, patch_size=vision['patch_size'], embed_dim=vision['embed_dim'],
            depths=tuple(vision['depths']), num_heads=tuple(vision['num_heads']),
            window_size=self.window_size, mlp_ratio=vision['mlp_ratio'], num_classes=0,
            global_pool='avg', drop_rate=0.0, proj_drop_rate=0.0, attn_drop_rate=0.0,
            drop_path_rate=0.0)
        self.vision_proj = nn.Linear(self.vision.num_features, embed_dim)
        self.text_tower = BertTextTower(build_bert(text), embed_dim)
        self.register_buffer('temperature', torch.tensor(CCLM_TEMPERATURE))
        self.embed_dim = embed_dim
        self.image_size = (image_size, image_size)
        self.image_mean = CCLM_IMAGE_MEAN
        self.image_std = CCLM_IMAGE_STD

        if not isinstance(tokenizer, BaseTokenizer):
            tokenizer = build_tokenizer(
                tokenizer or dict(type='CCLMTokenizer', name_or_path='xlm-roberta-large'),
                'model.backbone.tokenizer')
        self.tokenizer = tokenizer
        check_tokenizer_fits(self.tokenizer, self.text_tower, 'CCLM')
        if checkpoint is not None and not isinstance(tokenizer, CCLMTokenizer):
            # Random towers (tests) read any ids; trained ones the ids of cleaned captions.
            raise ValueError(f'tokenizer.type: the config builds a {type(tokenizer).__name__}, '
                             "but CCLM's text tower was trained on captions cleaned by its "
                             'pre_caption (lower case, punctuation removed, at most 30 words) '
                             "then tokenized by XLM-R's tokenizer; use 'CCLMTokenizer' "
                             '(name_or_path or tokenizer_file, as an HFTokenizer takes them)')
        self.checkpoint_report: CheckpointReport | None = None
        if checkpoint is not None:
            self.checkpoint_report = self.load_checkpoint(checkpoint, strict,
                                                          checkpoint_weights_only)
        if freeze:
            self.freeze()

    def load_checkpoint(self, checkpoint: str | Path | dict, strict: bool = True,
                        weights_only: bool = True) -> CheckpointReport:
        """Load an official CCLM checkpoint (file or state dict) into this backbone.

        Args:
            checkpoint: path of the file, or its state dict (``{'model': ...}`` accepted).
            strict: raise when backbone weights are missing or keys are unexplained.
            weights_only: torch's safe loader for files.

        Returns:
            The :class:`CheckpointReport` (also logged).

        Raises:
            ValueError: not a CCLM checkpoint, shapes that do not fit the configuration, or
                (``strict``) missing / unexpected keys.
        """
        if isinstance(checkpoint, dict):
            state_dict, source = checkpoint.get('model', checkpoint), '<state dict>'
        else:
            state_dict = read_cclm_checkpoint(checkpoint, weights_only=weights_only)
            source = str(checkpoint)
        converted, report = convert_cclm_state_dict(
            state_dict, self.state_dict(), self.text_tower.num_blocks, self.bias_interpolation,
            source)
        if strict and not report.complete:
            raise ValueError(f'{report.summary()}\nthis does not fit the configured CCLM '
                             'backbone (missing keys are named as the backbone holds them); '
                             "set the vision/text options to the checkpoint's. strict=False "
                             'would load it with the missing weights left as initialised '
                             '(random) in a frozen backbone')
        self.load_state_dict(converted, strict=False)
        print_log(report.summary(), logger='current')
        return report

    def pair_logits(self) -> tuple[torch.Tensor, None]:
        """CCLM's ``(1 / temp, None)``: the checkpoint's temperature (``temp``, 0.07 by default)
        divides the cosine of its contrastive pairs; it learns no bias."""
        return 1.0 / self.temperature, None

    @classmethod
    def text_tower_shape(cls, cfg: Mapping[str, Any]) -> TowerShape:
        """``hidden_size`` and ``num_layers`` of :data:`CCLM_TEXT` with the config's ``text``,
        and ``embed_dim``, the width of ``text_proj``."""
        options = with_defaults(cls, cfg)
        text = _merge(CCLM_TEXT, options['text'], 'text')
        return TowerShape(text['hidden_size'], text['num_layers'], options['embed_dim'])

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """``[B, 3, H, W]`` -> ``[B, E]``: ``vision_proj`` of the mean final patch token."""
        return self.vision_proj(self.vision(images))

    def encode_image_tokens(self, images: torch.Tensor) -> TokenOutput:
        """``[B, 3, H, W]`` -> the final Swin patches through ``vision_proj``, ``[B, h·w, E]``.

        ``vision_proj`` is linear, so the mean of the tokens is :meth:`encode_image`.
        """
        features = self.vision.forward_features(images)
        pooled = self.vision_proj(self.vision.forward_head(features, pre_logits=True))
        # timm's Swin returns NHWC maps; row-major patches are the token order.
        tokens = self.vision_proj(features.flatten(1, 2))
        mask = torch.ones(tokens.shape[:2], dtype=torch.bool, device=tokens.device)
        return TokenOutput(tokens, mask, pooled)

    def fingerprint_settings(self) -> str:
        return f'image {self.image_size}, window {self.window_size}'
