"""A timm vision transformer and a BERT text encoder as one :class:`VisionLanguageBackbone`.

The towers of CDDS's own experiments (and of LAPS, its nearest public base): a ViT-B/16 (or
Swin-B) image encoder and ``bert-base-uncased``, each followed by a linear map into a joint
space of width ``E`` (512). Unlike CLIP the two towers were never aligned with each other, so
the backbone is meant to be fine-tuned with the method on top (LAPS trains both at 0.1 × the
learning rate of the new layers); it is frozen when built, like every backbone, and a phase's
``trainable`` prefixes unfreeze it.

* image: ``timm.create_model(vision, num_classes=0)``; its ``forward_features`` are the tokens
  (ViT: prefix tokens such as CLS, then the patches; Swin, or a CNN such as ConvNeXt: the final
  ``h × w`` map, row by row), its ``forward_head(pre_logits=True)`` the pooled feature (ViT:
  CLS; Swin: mean); ``vision_proj`` maps both to ``E``.
* text: transformers' ``BertModel`` run layer by layer by the BERT-layer :class:`BertTextTower`
  (post-LN layers with adapter sites, padding mask, CLS pooling), whose ``text_proj`` maps to
  ``E``. So target-language branches and adapters work on this tower as on CCLM's.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from xmr.models.backbones.base import (
    TokenOutput,
    TowerShape,
    VisionLanguageBackbone,
    check_tokenizer_fits,
    offline_hf_config,
)
from xmr.models.backbones.bert import BERT_MODEL_TYPES, BertTextTower
from xmr.models.language.tokenizers import BaseTokenizer, build_tokenizer
from xmr.models.weight_files import (
    fetch_weights,
    read_weights,
    strict_load_refusal,
    transformers_layout_key,
    weights_file,
)
from xmr.registry import MODELS, with_defaults
from xmr.utils.listing import first_few

__all__ = ['ViTBERTBackbone']


def build_vision(name: str, pretrained: bool | str | None, options: dict) -> nn.Module:
    """A headless timm image model; ``pretrained``: ``True`` (timm's hub weights) or a file."""
    import timm

    if name.split('.')[0] not in timm.list_models():
        import difflib

        close = difflib.get_close_matches(name.split('.')[0], timm.list_models(), n=5)
        raise ValueError(f"unknown timm model '{name}'; closest: {close}")
    kwargs = dict(options, num_classes=0)
    if isinstance(pretrained, str):
        return _vision_from_file(name, Path(pretrained), kwargs)
    if not pretrained:
        return timm.create_model(name, pretrained=False, **kwargs)
    return fetch_weights(
        lambda: _vision_from_record(name, kwargs),
        f"timm's weights of '{name}'",
        'download them once and set vision_pretrained=<local file> (--cfg-options '
        'model.backbone.vision_pretrained=FILE)')


def _vision_from_record(name: str, kwargs: dict) -> nn.Module:
    """timm's ``name`` with the weights its pretrained record locates (timm's hub, its URL, or
    the ``file`` of a ``pretrained_cfg_overlay`` in ``kwargs``), loaded strictly, then headless.

    timm loads strictly only a model whose head is its record's: a headless one
    (``num_classes=0``) is loaded non-strictly, and weights missing from the record's file stay
    random without a word. The model is therefore built with the record's head, loaded through
    timm's own filter, and its head dropped after.

    Raises:
        ValueError: the record's weights lack keys of the model (or hold others), named.
    """
    import timm

    with_head = {key: value for key, value in kwargs.items() if key != 'num_classes'}
    try:
        model = timm.create_model(name, pretrained=True, **with_head)
    except RuntimeError as error:  # torch's strict load, of what timm's filter made of them
        raise _refusal(f"the weights timm's record of '{name}' names "
                       f'({_record_source(name, kwargs)})', name, error,
                       'Does vision_cfg change the architecture of the weights (depth, '
                       'embed_dim, ...)? Drop those fields, or give vision_pretrained=<file> of '
                       'this model') from error
    model.reset_classifier(0)
    return model


def _record_source(name: str, kwargs: dict) -> str:
    """Where timm's record of ``name`` (with the ``pretrained_cfg_overlay`` of ``kwargs``)
    has its weights: ``file``, else the hub repository, else the URL."""
    import timm

    record = {**timm.models.get_pretrained_cfg(name).to_dict(),
              **kwargs.get('pretrained_cfg_overlay', {})}
    if record.get('file'):
        return f"file {record['file']}"
    return f"hf-hub:{record['hf_hub_id']}" if record.get('hf_hub_id') else str(record.get('url'))


def _refusal(source: str, name: str, error: RuntimeError, fix: str) -> ValueError:
    """torch's refusal of a strict load as an error naming ``source``, the keys timm's filter
    made of the file that do not fit (counts and the first few), and the fix."""
    target = f"timm '{name}' once timm has adapted them"
    return strict_load_refusal(error, source, target, fix) or ValueError(
        f'{source} does not fit {target} ({" ".join(str(error).split())[:400]}). {fix}')


def _vision_from_file(name: str, path: Path, kwargs: dict) -> nn.Module:
    """timm's ``name`` with the weights of ``path`` (a file, or a hub snapshot folder holding
    ``model.safetensors`` or ``pytorch_model.bin``, whole or in shards), loaded strictly
    through timm's own filter (which resamples position embeddings to the configured size, and
    renames the layout of original releases such as Microsoft's Swin).

    timm loads non-strictly whenever the model's head differs from its record's, as a headless
    one does: weights missing from the file would stay random without a word. The record is told
    the model is headless and the file's classifier, if any, is dropped, so the load is strict.

    Raises:
        FileNotFoundError: no such file, or a folder without those files.
        ValueError: a truncated, damaged or foreign file (named by :func:`read_weights`), one
            in Hugging Face transformers' layout, or one whose weights are not those of
            ``name`` with ``kwargs`` (the keys missing, unexpected or of another shape once
            timm's filter has renamed them).
    """
    import timm

    if not path.exists():
        raise FileNotFoundError(f'vision_pretrained checkpoint {path} does not exist')
    what = f"timm '{name}' checkpoint"
    path = weights_file(path, what)  # in a hub snapshot folder, the file its errors name
    state = read_weights(path, what)
    foreign = transformers_layout_key(state)
    if foreign:  # timm's filter would fail on it with an AttributeError naming no file
        raise ValueError(f"{path} is in Hugging Face transformers' layout ({foreign}), which "
                         "timm does not read: give timm's file of the same weights (the "
                         'model.safetensors of its timm/ hub repository) or the original '
                         "release (Microsoft's swin_*.pth for Swin); docs/pretrained_weights.md")
    with torch.device('meta'):
        headless = timm.create_model(name, **kwargs).state_dict()
    for key in _classifier_keys(name):
        if key not in headless:
            state.pop(key, None)
    try:
        model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(
            state_dict=state, num_classes=0), **kwargs)
    except RuntimeError as error:  # torch's strict load, of what timm's filter made of the file
        raise _refusal(str(path), name, error, 'Is it a checkpoint of this model? Set vision '
                       '(and vision_cfg) to the model it was trained as') from error
    model.pretrained_cfg.pop('state_dict')  # the weights are in the model: no second copy
    return model


def _classifier_keys(name: str) -> list[str]:
    """The keys a classifier of timm's ``name`` may have in a file: under its record's name
    (``head.fc``) and under each module above it (``head``: Microsoft's Swin, which timm's
    filter renames)."""
    import timm

    classifiers = timm.models.get_pretrained_cfg(name).classifier or ()
    keys = []
    for classifier in (classifiers,) if isinstance(classifiers, str) else classifiers:
        parts = classifier.split('.')
        keys += [f"{'.'.join(parts[:end])}.{kind}" for end in range(len(parts), 0, -1)
                 for kind in ('weight', 'bias')]
    return keys


def _input_size(model: nn.Module) -> tuple[int, int]:
    """``(H, W)`` a timm image model takes: its patch embedding's (ViT, Swin: the configured
    ``img_size``), else its pretrained record's ``input_size``, the size its weights were trained
    at (a CNN such as ConvNeXt or ResNet, which has no patch embedding and runs at any size)."""
    size = getattr(getattr(model, 'patch_embed', None), 'img_size', None)
    if size is None:
        size = model.pretrained_cfg['input_size'][-2:]
    return tuple(size) if isinstance(size, (tuple, list)) else (size, size)


def build_text(pretrained: str | None, options: dict) -> nn.Module:
    """A transformers BERT-style encoder without pooler: loaded from ``pretrained`` (hub name or
    folder) with ``options`` overriding its config, or a random ``BertModel`` built from
    ``options``.

    A folder is loaded as the class its ``config.json`` names (``BertModel``, ``RobertaModel``,
    ``XLMRobertaModel``: :data:`~xmr.models.backbones.bert.BERT_MODEL_TYPES`), so that the tower
    numbers positions as the encoder was trained: RoBERTa's from ``pad_id + 1``. Read as a
    ``BertModel``, an XLM-R folder loaded every weight and ran at BERT's positions ``0..L-1``.

    Raises:
        ValueError: a config of another ``model_type``, or a checkpoint that lacks weights of
            the configured model (another BERT, or a ``text_cfg`` asking for more layers than it
            has).
    """
    from transformers import AutoConfig, AutoModel, BertConfig, BertModel

    if pretrained is None:
        return BertModel(BertConfig(**options), add_pooling_layer=False)

    def load() -> nn.Module:
        config = AutoConfig.from_pretrained(pretrained, **options)
        if config.model_type not in BERT_MODEL_TYPES:
            raise ValueError(f"text='{pretrained}': its config.json gives model_type="
                             f"'{config.model_type}'; the text tower runs BERT-style encoders "
                             f"({', '.join(BERT_MODEL_TYPES)}): give the folder or hub name of "
                             'one')
        model, info = AutoModel.from_pretrained(pretrained, config=config,
                                                add_pooling_layer=False,
                                                output_loading_info=True)
        # A BERT saved in half precision loads so (transformers 5's dtype='auto'): the tower
        # runs and trains in float32 beside its projection.
        model.float()
        # transformers initialises what the checkpoint lacks at random and only prints so.
        missing = sorted(info['missing_keys'])
        if missing:
            raise ValueError(f"the BERT '{pretrained}' lacks {len(missing)} weights of the "
                             f'configured {type(model).__name__} ({first_few(missing, 5)}): '
                             'they would stay random; give the folder of the BERT the config '
                             'names, or drop the text_cfg fields that contradict it')
        return model

    if Path(pretrained).is_dir():  # nothing to fetch: its own errors say what is wrong
        return load()
    return fetch_weights(load, f"the BERT '{pretrained}' (a Hugging Face hub name)",
                         'download the hub repository once (config.json, its weights and '
                         'tokenizer files) and set text=<its folder> (--cfg-options '
                         'model.backbone.text=FOLDER)')


@MODELS.register_module()
class ViTBERTBackbone(VisionLanguageBackbone):
    """timm ViT (or Swin) + BERT, each linearly mapped to a joint space of width ``embed_dim``.

    Args:
        vision: timm model name, e.g. ``'vit_base_patch16_224.orig_in21k'`` (LAPS's
            ``google/vit-base-patch16-224-in21k``), ``'vit_base_patch16_384'``,
            ``'swin_base_patch4_window7_224'``, or a CNN (``'convnext_base'``: its record's input
            size, which it has no patch embedding to fix).
        vision_cfg: extra ``timm.create_model`` arguments (``img_size``, ``drop_path_rate``, or
            a small ``embed_dim`` / ``depth`` / ``num_heads`` for tests).
        vision_pretrained: ``None``/``False`` for random weights, ``True`` for the weights timm
            names with ``vision`` (its record's, or the ``file`` of
            ``vision_cfg.pretrained_cfg_overlay``), or a local checkpoint file (or timm's hub
            snapshot folder); either is loaded strictly.
        text: a BERT hub name or folder whose weights are loaded (``'bert-base-uncased'``; a
            RoBERTa or XLM-R one runs with its own positions, :func:`build_text`), or ``None``
            for a random BERT built from ``text_cfg``.
        text_cfg: ``BertConfig`` fields; with ``text`` they override the loaded config.
        embed_dim: width ``E`` of ``vision_proj`` and ``text_proj`` (512 in CDDS).
        tokenizer: ``TOKENIZERS`` config or a built tokenizer; defaults to
            ``HFTokenizer(name_or_path=text)``.
        freeze: freeze every weight (phases that fine-tune the towers unfreeze them).
    """

    def __init__(self, vision: str = 'vit_base_patch16_224', vision_cfg: dict | None = None,
                 vision_pretrained: bool | str | None = None, text: str | None = None,
                 text_cfg: dict | None = None, embed_dim: int = 512,
                 tokenizer: dict | BaseTokenizer | None = None, freeze: bool = True) -> None:
        super().__init__()
        if text is None and not text_cfg:
            raise ValueError('ViTBERTBackbone needs text (a BERT name or folder) or text_cfg '
                             '(the BertConfig of a random BERT)')
        self.vision_name = vision
        self.vision = build_vision(vision, vision_pretrained, dict(vision_cfg or {}))
        if not hasattr(self.vision, 'forward_features') or \
                not hasattr(self.vision, 'forward_head'):
            raise TypeError(f"timm model '{vision}' has no forward_features/forward_head")
        self._nhwc = getattr(self.vision, 'output_fmt', 'NLC') == 'NHWC'
        self.vision_proj = nn.Linear(self.vision.num_features, embed_dim)
        self.text_tower = BertTextTower(build_text(text, dict(text_cfg or {})), embed_dim)
        self.embed_dim = embed_dim
        self.image_size = _input_size(self.vision)
        config = self.vision.pretrained_cfg
        self.image_mean = tuple(config.get('mean', (0.5, 0.5, 0.5)))
        self.image_std = tuple(config.get('std', (0.5, 0.5, 0.5)))

        if not isinstance(tokenizer, BaseTokenizer):
            if tokenizer is None and text is None:
                raise ValueError('a random BERT (text=None) needs an explicit tokenizer config')
            tokenizer = build_tokenizer(tokenizer or dict(type='HFTokenizer', name_or_path=text),
                                        'model.backbone.tokenizer')
        self.tokenizer = tokenizer
        check_tokenizer_fits(self.tokenizer, self.text_tower, 'the BERT')
        if freeze:
            self.freeze()

    def _features(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, 3, H, W]`` -> tokens ``[B, N, C]`` and pooled ``[B, C]`` of the timm model."""
        features = self.vision.forward_features(images)
        pooled = self.vision.forward_head(features, pre_logits=True)
        tokens = features
        if features.dim() == 4:  # a map: Swin's NHWC, a CNN's NCHW (ConvNeXt, ResNet)
            tokens = features.flatten(1, 2) if self._nhwc else features.flatten(2).transpose(1, 2)
        if tokens.dim() != 3:
            raise TypeError(f"timm model '{self.vision_name}' gives features of shape "
                            f'{tuple(features.shape)}; tokens need [B, N, C] or a feature map')
        return tokens, pooled

    @classmethod
    def text_tower_shape(cls, cfg: Mapping[str, Any]) -> TowerShape | None:
        """``hidden_size`` and ``num_hidden_layers`` of the ``text_cfg`` of a random BERT
        (``text=None``), or of a named BERT's config with ``text_cfg`` over it, read from its
        folder or the Hugging Face cache (:func:`offline_hf_config`), and ``embed_dim``, the
        width of ``text_proj``; ``None`` for a named BERT neither holds."""
        from transformers import AutoConfig, BertConfig

        options = with_defaults(cls, cfg)
        text_cfg = dict(options['text_cfg'] or {})
        config = BertConfig(**text_cfg) if options['text'] is None else \
            offline_hf_config(AutoConfig, options['text'], **text_cfg)
        if config is None:
            return None
        return TowerShape(config.hidden_size, config.num_hidden_layers, options['embed_dim'])

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """``[B, 3, H, W]`` -> ``[B, E]``: ``vision_proj`` of the timm model's pooled feature."""
        return self.vision_proj(self.vision.forward_head(self.vision.forward_features(images),
                                                         pre_logits=True))

    def encode_image_tokens(self, images: torch.Tensor) -> TokenOutput:
        """``[B, 3, H, W]`` -> every output token through ``vision_proj``, ``[B, N, E]``."""
        tokens, pooled = self._features(images)
        projected = self.vision_proj(tokens)
        mask = torch.ones(projected.shape[:2], dtype=torch.bool, device=projected.device)
        return TokenOutput(projected, mask, self.vision_proj(pooled))

    def fingerprint_settings(self) -> str:
        # timm's ViT keeps its pooling in a plain attribute: 'avg' and 'max' share weights.
        return (f'{self.vision_name}, image {self.image_size}, pooling '
                f"{getattr(self.vision, 'global_pool', '')}")
