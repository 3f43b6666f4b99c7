"""Multilingual-CLIP (M-CLIP, Carlsson et al., 2022) as a frozen backbone.

M-CLIP distils CLIP's text tower into a multilingual encoder: a Hugging Face XLM-R encoder whose
token outputs are mean-pooled over the real tokens and mapped by one linear layer into the space
of an (unchanged) CLIP image tower::

    r^T = W · (Σ_l m_l h_l / Σ_l m_l) + b,    h = XLM-R(tokens), m = attention mask

PECTVLM uses ``M-CLIP/XLM-Roberta-Large-Vit-L-14`` (XLM-R large, ``Linear(1024 → 768)``) with
OpenAI's CLIP ViT-L/14 image tower, both frozen, and a fixed logit scale of 100. Its release
holds ``transformer.*`` (the XLM-R encoder) and ``LinearTransformation.{weight,bias}``; the XLM-R
architecture is that of ``modelBase`` (``xlm-roberta-large``), which xmr takes as a config so
that nothing is downloaded. The image tower is any open_clip vision tower.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from xmr.json_files import load_json
from xmr.models.backbones.base import (
    TokenOutput,
    TowerShape,
    VisionLanguageBackbone,
    check_tokenizer_fits,
)
from xmr.models.backbones.bert import BertTextTower
from xmr.models.backbones.open_clip import open_clip_image_tokens
from xmr.models.backbones.open_clip_pretrained import (
    TRAINED_TOKENIZER_FIELDS,
    PretrainedRecord,
    apply_image_record,
    build_open_clip,
    check_trained_tokenizer,
    resolve_pretrained,
    settled_tokenizer_cfg,
)
from xmr.models.language.tokenizers import BaseTokenizer, build_tokenizer
from xmr.models.weight_files import check_weights_fit, read_weights, weights_file
from xmr.registry import MODELS, with_defaults

__all__ = ['MultilingualCLIPTextTower', 'MultilingualCLIPBackbone', 'XLMR_LARGE',
           'convert_mclip_state_dict']

#: ``xlm-roberta-large``, the ``modelBase`` of M-CLIP's XLM-R-Large checkpoints.
XLMR_LARGE = dict(vocab_size=250002, hidden_size=1024, num_hidden_layers=24,
                  num_attention_heads=16, intermediate_size=4096, hidden_act='gelu',
                  max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5,
                  pad_token_id=1, bos_token_id=0, eos_token_id=2)

#: The hub repository of the release PECTVLM uses.
MCLIP_RELEASE = 'M-CLIP/XLM-Roberta-Large-Vit-L-14'
#: The tokenizer M-CLIP's XLM-R reads (the release ships a copy of it).
XLMR_LARGE_TOKENIZER = dict(type='HFTokenizer', name_or_path='xlm-roberta-large', clean=None,
                            lowercase=False, strip_sep_token=False)

#: Weights of the release that M-CLIP's forward never reads.
_UNUSED_PREFIXES = ('transformer.pooler.',)
_UNUSED_SUFFIXES = ('position_ids', 'token_type_ids')


class MultilingualCLIPTextTower(BertTextTower):
    """An XLM-R encoder run layer by layer with adapter sites, mean-pooled and linearly mapped.

    XLM-R's layers are BERT's post-LN layers, so the written-out layers of
    :class:`~xmr.models.backbones.bert.BertTextTower` run them (every q/k/v, output and FFN
    projection and each sub-layer output is a site); what differs is RoBERTa's positions, which
    start at ``pad_id + 1``, the masked mean pooling and the head, M-CLIP's linear map
    (``text_proj``) without a final norm. The frozen tower applies no dropout.

    Args:
        xlmr: a transformers ``XLMRobertaModel`` (used, not copied).
        embed_dim: output width of the linear map (768 for ViT-L/14).
    """

    causal = False
    pooling = 'mean'


def convert_mclip_state_dict(state_dict: Mapping[str, torch.Tensor],
                             source: str = '<state dict>') -> dict[str, torch.Tensor]:
    """M-CLIP's release keys -> keys of :class:`MultilingualCLIPTextTower`.

    ``transformer.embeddings.*`` -> ``embeddings.*``, ``transformer.encoder.layer.*`` ->
    ``layers.*``, ``LinearTransformation.*`` -> ``text_proj.*``; the pooler and the position-id
    buffers are dropped (M-CLIP never reads them).

    Raises:
        ValueError: a key outside the release's layout, named with ``source``.
    """
    converted: dict[str, torch.Tensor] = {}
    unknown = []
    for key, value in state_dict.items():
        if key.startswith(_UNUSED_PREFIXES) or key.endswith(_UNUSED_SUFFIXES):
            continue
        if key.startswith('transformer.embeddings.'):
            converted['embeddings.' + key[len('transformer.embeddings.'):]] = value
        elif key.startswith('transformer.encoder.layer.'):
            converted['layers.' + key[len('transformer.encoder.layer.'):]] = value
        elif key.startswith('LinearTransformation.'):
            converted['text_proj.' + key[len('LinearTransformation.'):]] = value
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(f'{source} is not an M-CLIP text checkpoint: unexpected keys '
                         f'{unknown[:5]} (expected transformer.* and LinearTransformation.*)')
    return converted


#: ``model_type`` values of the configs whose encoders :class:`MultilingualCLIPTextTower` runs
#: (RoBERTa's layers and positions); ``'M-CLIP'``: the release's own config, read through
#: its ``modelBase``.
_XLMR_MODEL_TYPES = ('xlm-roberta', 'roberta')
#: ``modelBase`` values whose config xmr holds, read without the hub.
_KNOWN_BASES = {'xlm-roberta-large': XLMR_LARGE}


def _xlmr_config(text_encoder: Mapping[str, Any] | str, local_files_only: bool = False):
    """The XLM-R config ``text_encoder`` names: config keys, a ``config.json``, or a Hugging
    Face name or folder, an M-CLIP release's included.

    A release's ``config.json`` is M-CLIP's own (``model_type='M-CLIP'``): its encoder is
    ``modelBase``'s (``xlm-roberta-large``: :data:`XLMR_LARGE`), ``transformerDimensions``
    wide; read as an XLM-R config it gave transformers' defaults (768 wide, 12 layers).

    Raises:
        OSError: a name or folder neither the folder nor (``local_files_only``) the Hugging
            Face cache holds.
        ValueError: a config of another encoder (``model_type``), or an M-CLIP config whose
            ``transformerDimensions`` is not its base's width, naming the file and fields.
    """
    from transformers import PretrainedConfig, XLMRobertaConfig

    if isinstance(text_encoder, Mapping):
        return XLMRobertaConfig(**text_encoder)
    if Path(text_encoder).is_file():
        # load_json: a broken file is named with its fault and place.
        fields = load_json(Path(text_encoder))
    else:
        fields = PretrainedConfig.get_config_dict(text_encoder,
                                                  local_files_only=local_files_only)[0]
    model_type = fields.get('model_type')
    if model_type == 'M-CLIP':
        return _release_base_config(fields, text_encoder, local_files_only)
    if model_type not in (None, *_XLMR_MODEL_TYPES):
        raise ValueError(f'text_encoder={text_encoder!r}: model_type={model_type!r}; '
                         "M-CLIP's text tower runs XLM-R encoders "
                         f'({", ".join(_XLMR_MODEL_TYPES)})')
    return XLMRobertaConfig(**fields)


def _release_base_config(fields: Mapping[str, Any], text_encoder: str, local_files_only: bool):
    """The XLM-R config of an M-CLIP release's ``modelBase``, checked against the release's
    ``transformerDimensions`` (the input width of its ``LinearTransformation``)."""
    from transformers import XLMRobertaConfig

    base = fields.get('modelBase', 'xlm-roberta-large')  # MCLIPConfig's default
    config = (XLMRobertaConfig(**_KNOWN_BASES[base]) if base in _KNOWN_BASES
              else _xlmr_config(base, local_files_only))
    width = fields.get('transformerDimensions', config.hidden_size)
    if width != config.hidden_size:
        raise ValueError(f'text_encoder={text_encoder!r}: the M-CLIP config gives '
                         f'transformerDimensions={width}, but its modelBase {base!r} is '
                         f'{config.hidden_size} wide')
    return config


@MODELS.register_module()
class MultilingualCLIPBackbone(VisionLanguageBackbone):
    """A frozen M-CLIP: XLM-R text tower with its linear map, and an open_clip image tower.

    Args:
        text_encoder: the XLM-R architecture: config keys (default :data:`XLMR_LARGE`), a
            ``config.json`` file, or a Hugging Face name/folder; an M-CLIP release's (its
            ``config.json`` is M-CLIP's own) gives its ``modelBase``'s.
        embed_dim: output width of the text linear map; must equal the image tower's.
        checkpoint: M-CLIP text weights (``transformer.*`` + ``LinearTransformation.*``): a
            file or a folder as the release ships them; ``None`` keeps random weights (tests).
        image_arch: open_clip architecture of the image tower (``'ViT-L-14'``), or ``None``
            with ``image_model_cfg``.
        image_pretrained: open_clip pretrained tag (``'openai'``) or CLIP checkpoint file
            (OpenAI's ``ViT-L-14.pt`` included), or ``None`` for random weights.
        image_pretrained_cfg: the tag whose settings a checkpoint file was trained with
            (``'openai'``) or a dict of them; required with a file (see
            :class:`~xmr.models.backbones.open_clip.OpenCLIPBackbone`).
        image_model_cfg: an inline open_clip model config for the image tower (tests).
        tokenizer: tokenizer config; default: XLM-R's tokenizer from the hub name
            ``xlm-roberta-large`` (pass ``tokenizer_file`` for an offline JSON), reading the raw
            caption up to the tower's 512 positions (``max_length`` where a config leaves it
            out). Another class than ``HFTokenizer`` (CLIP's BPE, CCLM's), or ``clean``,
            ``lowercase`` or ``strip_sep_token`` set otherwise than M-CLIP reads, is refused.
        freeze: freeze every weight.

    Raises:
        ValueError: a tokenizer that does not fit the XLM-R tower, or is no ``HFTokenizer``;
            an ``embed_dim`` other than the image tower's.
    """

    def __init__(self, text_encoder: dict | str | None = None, embed_dim: int = 768,
                 checkpoint: str | None = None, image_arch: str | None = 'ViT-L-14',
                 image_pretrained: str | None = None,
                 image_pretrained_cfg: str | dict | None = None,
                 image_model_cfg: dict | None = None,
                 tokenizer: dict | BaseTokenizer | None = None, freeze: bool = True) -> None:
        super().__init__()
        from transformers import XLMRobertaModel

        self.config = _xlmr_config(XLMR_LARGE if text_encoder is None else text_encoder)
        self.text_tower = MultilingualCLIPTextTower(
            XLMRobertaModel(self.config, add_pooling_layer=False), embed_dim)
        self.checkpoint = checkpoint
        if checkpoint is not None:
            self.load_text_checkpoint(checkpoint)

        self.visual, self.record = self._build_visual(image_arch, image_pretrained,
                                                      image_pretrained_cfg, image_model_cfg)
        self.arch = self.record.arch
        image_dim = getattr(self.visual, 'output_dim', None)
        if image_dim is not None and image_dim != embed_dim:
            raise ValueError(f'the text linear map gives {embed_dim}-d embeddings but the image '
                             f'tower {self.arch} gives {image_dim}-d ones')
        self.embed_dim = embed_dim
        apply_image_record(self, self.record)

        if not isinstance(tokenizer, BaseTokenizer):
            tokenizer_cfg = settled_tokenizer_cfg(tokenizer, XLMR_LARGE_TOKENIZER,
                                                  TRAINED_TOKENIZER_FIELDS,
                                                  'M-CLIP reads the raw caption with')
            if tokenizer_cfg.get('type') == 'HFTokenizer':
                # M-CLIP's tokenizer call does not truncate: its XLM-R reads 512 positions.
                tokenizer_cfg.setdefault('max_length', self.text_tower.context_length)
            tokenizer = build_tokenizer(tokenizer_cfg, 'model.backbone.tokenizer')
        self.tokenizer = tokenizer
        check_tokenizer_fits(self.tokenizer, self.text_tower, 'M-CLIP XLM-R')
        check_trained_tokenizer(self.tokenizer, XLMR_LARGE_TOKENIZER, 'M-CLIP XLM-R')
        if freeze:
            self.freeze()

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """Refuse as the config loads (:func:`~xmr.registry.check_part_options`) what the build
        would refuse of the image tower's weights after the runner has written its work dir:
        an unknown ``image_arch`` or tag, an ``image_pretrained`` file that is missing or has
        no ``image_pretrained_cfg``, contradicting settings
        (:func:`~xmr.models.backbones.open_clip_pretrained.resolve_pretrained`, which reads no
        weights).

        Raises:
            ValueError: naming the ``image_`` field, the value and the names or fix.
            UserError: a missing or unreadable ``image_pretrained`` path.
        """
        options = with_defaults(cls, cfg)
        resolve_pretrained(options['image_arch'], options['image_pretrained'],
                           options['image_pretrained_cfg'], options['image_model_cfg'],
                           key_prefix='image_')

    @staticmethod
    def _build_visual(arch: str | None, pretrained: str | None, pretrained_cfg: str | dict | None,
                      model_cfg: dict | None) -> tuple[nn.Module, PretrainedRecord]:
        clip, record = build_open_clip(arch, pretrained, pretrained_cfg, model_cfg,
                                       key_prefix='image_')
        # Only the image tower is kept: M-CLIP's text side replaces CLIP's.
        return clip.visual, record

    def load_text_checkpoint(self, checkpoint: str | Path | Mapping[str, torch.Tensor]) -> None:
        """Load M-CLIP's released text weights (file, folder or state dict), strictly.

        A folder is read as the release ships it: ``model.safetensors`` or
        ``pytorch_model.bin``, whole or in shards.

        Raises:
            ValueError: an unreadable file, keys outside the layout, or weights missing or
                shaped for another XLM-R (counts and the first few keys).
        """
        if isinstance(checkpoint, Mapping):
            state_dict, source = checkpoint, '<state dict>'
        else:
            try:
                path = weights_file(checkpoint, 'M-CLIP text checkpoint')
            except FileNotFoundError as error:
                raise FileNotFoundError(
                    f'{error}: download an M-CLIP release there (the hub repository '
                    f'{MCLIP_RELEASE}: config.json, its weights and tokenizer files); the '
                    'PECTVLM configs read it as mclip_dir, for the weights and both tokenizers '
                    '(elsewhere: --cfg-options model.backbone.checkpoint=DIR '
                    'model.backbone.tokenizer.name_or_path=DIR '
                    'model.language_branch.tokenizer.name_or_path=DIR)') from error
            state_dict, source = read_weights(path, 'M-CLIP text checkpoint'), str(path)
        converted = convert_mclip_state_dict(state_dict, source)
        check_weights_fit(self.text_tower.state_dict(), converted, source,
                          'the configured XLM-R encoder',
                          'Set text_encoder to the XLM-R config the checkpoint was trained with '
                          '(XLMR_LARGE for XLM-Roberta-Large-Vit-L-14) and embed_dim to its '
                          'LinearTransformation output')
        self.text_tower.load_state_dict(converted, strict=True)

    @classmethod
    def text_tower_shape(cls, cfg: Mapping[str, Any]) -> TowerShape | None:
        """``hidden_size`` and ``num_hidden_layers`` of ``text_encoder`` (keys or a
        ``config.json``; :data:`XLMR_LARGE` by default) and ``embed_dim``, the width of its
        linear map; for a Hugging Face name or folder (an M-CLIP release's: its ``modelBase``),
        its config as its folder or the Hugging Face cache holds it, ``None`` where neither
        does (the build fetches it, or says what is missing)."""
        options = with_defaults(cls, cfg)
        encoder = options['text_encoder']
        try:
            config = _xlmr_config(XLMR_LARGE if encoder is None else encoder,
                                  local_files_only=True)
        except OSError:
            return None
        return TowerShape(config.hidden_size, config.num_hidden_layers, options['embed_dim'])

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """``[B, 3, H, W]`` -> ``[B, E]`` with the open_clip image tower."""
        return self.visual(images)

    def encode_image_tokens(self, images: torch.Tensor) -> TokenOutput:
        """``[B, 3, H, W]`` -> class token then patches, ``[B, 1 + P, E]``, for token-level
        methods such as CDDS (:func:`~xmr.models.backbones.open_clip.open_clip_image_tokens`)."""
        return open_clip_image_tokens(self.visual, images, self.arch)

    def fingerprint_settings(self) -> str:
        return repr(sorted(self.record.settings().items()))
