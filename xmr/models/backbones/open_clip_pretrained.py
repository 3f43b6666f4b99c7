"""An open_clip CLIP built exactly as its pretrained weights were trained.

open_clip keeps two records per model: the architecture's config (widths, image size, text
context, tokenizer, and for some names ``quick_gelu``) and, per pretrained tag, the settings the
weights were trained with (``quick_gelu``, image mean/std, interpolation, resize mode).
``open_clip.create_model('ViT-B-32', pretrained='openai')`` (open_clip 3.x) builds ``nn.GELU``
and only warns, although OpenAI trained with QuickGELU. xmr resolves both records into one
:class:`PretrainedRecord` and builds from it; a config value that contradicts it is refused
with the field, the config's value and the record's.

Local checkpoint files carry no record, so they name one with ``pretrained_cfg``: the tag whose
settings they were trained with (``'openai'`` for OpenAI's ``ViT-B-32.pt``), or the settings
themselves as a dict (``dict(quick_gelu=False)`` for weights trained with the architecture's own
config). See ``docs/pretrained_weights.md``.
"""
from __future__ import annotations

import copy
import difflib
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import open_clip
import torch
from open_clip.model import set_model_preprocess_cfg
from open_clip.transform import PreprocessCfg
from torch import nn

from xmr.models.language.tokenizers import HFTokenizer, NLLBTokenizer, OpenCLIPTokenizer
from xmr.models.weight_files import (
    CHECKPOINT_SUFFIXES,
    HF_WEIGHT_FILES,
    WeightsMismatchError,
    check_weights_fit,
    fetch_weights,
    read_weights,
    transformers_layout_key,
    weights_file,
)
from xmr.registry import MODELS
from xmr.utils.cli import given_file

__all__ = ['PretrainedRecord', 'pretrained_record', 'record_for', 'resolve_pretrained',
           'build_open_clip', 'apply_image_record', 'read_clip_weights', 'record_tokenizer_cfg',
           'check_record_tokenizer', 'check_record_context', 'check_trained_tokenizer',
           'settled_tokenizer_cfg', 'TRAINED_TOKENIZER_FIELDS', 'arch_embed_dim',
           'is_checkpoint_path', 'check_pretrained_file', 'RECORD_FIELDS', 'text_tokenizer_cfg',
           'hf_tokenizer_name', 'check_model_cfg']

#: Settings a tag's record (or a ``pretrained_cfg`` dict) may carry.
RECORD_FIELDS = ('quick_gelu', 'mean', 'std', 'interpolation', 'resize_mode', 'fill_color')
#: The resize modes and interpolations of open_clip's preprocessing records, the ones
#: :class:`~xmr.datasets.transforms.MediaTransform` reproduces.
RESIZE_MODES = ('shortest', 'longest', 'squash')
INTERPOLATIONS = ('bicubic', 'bilinear')
#: The weight files of an open_clip hub repository, safetensors first as open_clip reads them.
OPEN_CLIP_WEIGHT_FILES = ('open_clip_model.safetensors', 'open_clip_pytorch_model.bin')
#: Attributes OpenAI's TorchScript archives keep as tensors beside the weights.
_OPENAI_JIT_ATTRIBUTES = ('input_resolution', 'context_length', 'vocab_size')


@dataclass(frozen=True)
class PretrainedRecord:
    """Everything a frozen open_clip model must run with to compute what its authors computed.

    Attributes:
        arch: open_clip architecture name, or ``'custom'`` for an inline model config.
        source: where the settings come from, for messages (``"tag 'openai'"``).
        quick_gelu: ``x * sigmoid(1.702 x)`` instead of GELU in every MLP (OpenAI's weights).
        image_size: ``(H, W)`` input of the image tower.
        mean / std: per-channel normalisation in ``[0, 1]`` units.
        interpolation: ``'bicubic'`` | ``'bilinear'`` of the resize.
        resize_mode: ``'shortest'`` (resize + centre crop) | ``'longest'`` (pad) | ``'squash'``.
        fill_color: padding value of ``'longest'``.
        tokenizer: open_clip name whose tokenizer the text tower was trained with.
        context_length: text positions of the tower (captions are cut to it).
    """

    arch: str
    source: str
    quick_gelu: bool
    image_size: tuple[int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    interpolation: str
    resize_mode: str
    fill_color: int
    tokenizer: str
    context_length: int

    def preprocess_cfg(self) -> dict[str, Any]:
        """open_clip's ``PreprocessCfg`` fields: ``size``, ``mode``, ``mean``, ``std``, ..."""
        return dict(size=self.image_size, mode='RGB', mean=self.mean, std=self.std,
                    interpolation=self.interpolation, resize_mode=self.resize_mode,
                    fill_color=self.fill_color)

    def settings(self) -> dict[str, Any]:
        """The fields that change what the model computes (all but ``source``)."""
        return {k: v for k, v in asdict(self).items() if k != 'source'}


def pretrained_record(arch: str | None, pretrained_cfg: str | Mapping[str, Any] | None = None,
                      model_cfg: Mapping[str, Any] | None = None,
                      tag_key: str = 'pretrained_cfg') -> PretrainedRecord:
    """Merge the architecture's config with a tag's record (or explicit settings).

    Args:
        arch: open_clip architecture name; ``None`` with ``model_cfg``.
        pretrained_cfg: a pretrained tag of ``arch`` whose record applies, a dict of
            :data:`RECORD_FIELDS` (anything left out keeps the architecture's value), or ``None``
            for the architecture's own settings (random weights).
        model_cfg: inline open_clip model config (tests, the demo's tiny CLIP).
        tag_key: what the config calls the tag, for messages (``'pretrained'``,
            ``'image_pretrained_cfg'``).

    Raises:
        ValueError: an unknown architecture or tag (with the known ones), a dict key outside
            :data:`RECORD_FIELDS`, or ``quick_gelu`` fixed by the architecture's name
            (``-quickgelu``) and contradicted by the tag or dict.
    """
    arch_cfg = _model_cfg(arch, model_cfg)
    name = arch or 'custom'
    settings = {k: v for k, v in asdict(PreprocessCfg()).items() if k != 'mode'}
    settings.update({k: v for k, v in arch_cfg.get('preprocess_cfg', {}).items()
                     if k in settings})
    settings['quick_gelu'] = arch_cfg.get('quick_gelu', False)
    given, source = _given_settings(arch, pretrained_cfg, settings['quick_gelu'], tag_key)
    if 'quick_gelu' in arch_cfg and bool(given['quick_gelu']) != bool(arch_cfg['quick_gelu']):
        raise ValueError(
            f"quick_gelu: architecture {name} fixes {arch_cfg['quick_gelu']}, {source} of the "
            f"weights records {given['quick_gelu']}; use the architecture without the "
            "'-quickgelu' suffix (the record then chooses) or the weights' own tag")
    settings.update(given)
    size = arch_cfg.get('vision_cfg', {}).get('image_size', settings['size'])
    return PretrainedRecord(
        arch=name, source=source or f'{name} defaults', quick_gelu=bool(settings['quick_gelu']),
        image_size=(size, size) if isinstance(size, int) else tuple(size),
        mean=tuple(settings['mean']), std=tuple(settings['std']),
        interpolation=settings['interpolation'], resize_mode=settings['resize_mode'],
        fill_color=int(settings['fill_color']), tokenizer=arch or 'ViT-B-32',
        context_length=int(arch_cfg.get('text_cfg', {}).get('context_length', 77)))


def _given_settings(arch: str | None, pretrained_cfg: str | Mapping[str, Any] | None,
                    arch_quick_gelu: bool, tag_key: str) -> tuple[dict[str, Any], str | None]:
    """``(settings, source)`` a tag or dict sets; ``quick_gelu`` always among them: a tag or
    dict without the key keeps the architecture's (GELU unless its config says QuickGELU), as
    open_clip's ``create_model`` builds it (``roberta-ViT-B-32``'s one tag records none)."""
    if isinstance(pretrained_cfg, str):
        given = {k: v for k, v in _tag_cfg(arch, pretrained_cfg, tag_key).items()
                 if k in RECORD_FIELDS and v is not None}
        return {'quick_gelu': arch_quick_gelu, **given}, f"open_clip tag '{pretrained_cfg}'"
    given = dict(pretrained_cfg or {})
    unknown = sorted(set(given) - set(RECORD_FIELDS))
    if unknown:
        raise ValueError(f'pretrained_cfg keys {unknown} are not settings of a pretrained '
                         f'record; use {list(RECORD_FIELDS)} or an open_clip tag name')
    for key, value in given.items():
        _check_setting(key, value, tag_key)
    return {'quick_gelu': arch_quick_gelu, **given}, 'pretrained_cfg dict' if given else None


def _is_channels(value: Any, positive: bool = False) -> bool:
    """``value`` is one real number per RGB channel (each ``> 0`` when ``positive``)."""
    return (isinstance(value, (list, tuple)) and len(value) == 3
            and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                    and math.isfinite(v) and (v > 0 or not positive) for v in value))


#: What each setting of a ``pretrained_cfg`` dict takes: its check and, for messages, its
#: values. The data preprocessor computes ``(x - 255 mean) / (255 std)`` per channel.
_SETTING_VALUES = {
    'quick_gelu': (lambda v: isinstance(v, bool), 'True or False'),
    'mean': (_is_channels, 'three numbers, one per RGB channel in [0, 1] units'),
    'std': (lambda v: _is_channels(v, positive=True),
            'three positive numbers, one per RGB channel in [0, 1] units'),
    'interpolation': (lambda v: v in INTERPOLATIONS, f'one of {INTERPOLATIONS}'),
    'resize_mode': (lambda v: v in RESIZE_MODES, f'one of {RESIZE_MODES}'),
    'fill_color': (lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255,
                   'an integer in 0..255'),
}


def _check_setting(key: str, value: Any, tag_key: str) -> None:
    """Refuse a ``pretrained_cfg`` dict's setting the model or its media cannot run with.

    Unchecked, such a value was read only where it is used, after the model was built: a
    ``std`` of 0 normalised every image to infinities, two ``mean`` values failed in the data
    preprocessor's reshape, an unknown ``resize_mode`` in the dataset's transform, neither
    naming the setting.

    Raises:
        ValueError: naming ``{tag_key}.{key}``, the value and what it takes.
    """
    check, takes = _SETTING_VALUES[key]
    if not check(value):
        raise ValueError(f'{tag_key}.{key}={value!r}: it takes {takes} (the settings the '
                         'weights were trained with; docs/pretrained_weights.md)')


def _model_cfg(arch: str | None, model_cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    if (arch is None) == (model_cfg is None):
        raise ValueError('an open_clip model needs exactly one of arch or model_cfg')
    if model_cfg is not None:
        return copy.deepcopy(dict(model_cfg))
    _refuse_located_name(arch)
    found = open_clip.get_model_config(arch)
    if found is None:
        close = difflib.get_close_matches(arch, open_clip.list_models(), n=5)
        raise ValueError(f"unknown open_clip architecture '{arch}'; closest: {close}")
    return found


#: open_clip's model names that locate a model (``create_model`` then loads its weights too).
_LOCATED_NAMES = ('hf-hub:', 'local-dir:')


def _hub_records(repository: str) -> list[tuple[str, str]]:
    """``(arch, tag)`` of every open_clip record whose weights live in the hub ``repository``
    (``'timm/ViT-B-16-SigLIP2-256'``; hub names ignore case)."""
    def repository_of(hub: str) -> str:  # some records name a file in it
        return '/'.join(hub.strip('/').split('/')[:2]).lower()

    return [(arch, tag) for arch, tag in open_clip.list_pretrained()
            if repository_of(open_clip.get_pretrained_cfg(arch, tag).get('hf_hub', ''))
            == repository_of(repository)]


def _refuse_located_name(arch: str) -> None:
    """Refuse open_clip's ``hf-hub:`` and ``local-dir:`` model names, naming what to set.

    With them ``open_clip.create_model`` reads the config of a hub repository or folder and
    loads its weights; xmr's ``pretrained`` alone names weights, so the name would give random
    ones (``pretrained=None``), and a hub name fetches a config offline machines retry for
    half a minute before failing.

    Raises:
        ValueError: naming the ``arch`` and tag of open_clip's record of that repository, or
            ``model_cfg`` and ``pretrained`` for a folder or a repository without one.
    """
    schema = next((schema for schema in _LOCATED_NAMES if arch.startswith(schema)), None)
    if schema is None:
        return
    location = arch[len(schema):]
    records = _hub_records(location) if schema == 'hf-hub:' else []
    why = (f"arch='{arch}' names open_clip's {schema[:-1]} model, whose weights open_clip's "
           'create_model loads with it; xmr reads weights from pretrained alone and would '
           'build random ones')
    if records:
        settings = ' or '.join(f"arch='{model}', pretrained='{tag}'" for model, tag in records)
        raise ValueError(f'{why}: set {settings} (open_clip\'s record of that repository: '
                         'its image and text settings too)')
    folder = location if schema == 'local-dir:' else '<its local snapshot folder>'
    raise ValueError(f"{why}: set arch=None, model_cfg=<the 'model_cfg' of {folder}/"
                     "open_clip_config.json, with that file's 'preprocess_cfg' inside> and "
                     f"pretrained='{folder}' (docs/pretrained_weights.md)")


def _tag_cfg(arch: str | None, tag: str, key: str) -> dict[str, Any]:
    """open_clip's record of ``tag`` of ``arch``, which the config gives as ``key``.

    Raises:
        ValueError: an unknown tag, named with ``key``, the closest tags and all of them
            (``pretrained``: also as a file, since a tag is read as one only when it looks like
            a path).
    """
    if arch is None:
        raise ValueError(f"{key}: pretrained tag '{tag}' needs an open_clip arch name, not "
                         'model_cfg')
    cfg = open_clip.get_pretrained_cfg(arch, tag)
    if not cfg:
        tags = open_clip.list_pretrained_tags_by_model(arch)
        close = difflib.get_close_matches(_clean_tag(tag), tags, n=3, cutoff=0.5)
        as_file = not key.endswith('_cfg')  # pretrained: a tag, or a file it could name
        what = 'neither a file nor an open_clip tag' if as_file else 'no open_clip tag'
        fix = '; a local file needs its path' if as_file else ''
        raise ValueError(f"{key}='{tag}' is {what} of {arch} (closest: {close}; tags: "
                         f'{tags}){fix}')
    return cfg


def _clean_tag(tag: str) -> str:
    """A tag as open_clip looks it up: ``'laion2b-s34b-b79k'`` is ``'laion2b_s34b_b79k'``."""
    return tag.lower().replace('-', '_')


def is_checkpoint_path(pretrained: str) -> bool:
    """A ``pretrained`` value naming a file (existing, or shaped like a path) rather than a tag."""
    return (Path(pretrained).exists() or '/' in pretrained
            or pretrained.endswith(CHECKPOINT_SUFFIXES))


def record_for(arch: str | None, pretrained: str | None,
               pretrained_cfg: str | Mapping[str, Any] | None = None,
               model_cfg: Mapping[str, Any] | None = None,
               key_prefix: str = '') -> PretrainedRecord:
    """The record weights named by ``pretrained`` must run with (reads no file).

    Args:
        arch: open_clip architecture name (``None`` with ``model_cfg``).
        pretrained: a tag of ``arch``, a local checkpoint path, or ``None``.
        pretrained_cfg: for a local file, the tag whose settings it was trained with, or a dict
            of them; required with ``arch`` (a file carries no record). Not allowed with a tag.
        model_cfg: inline open_clip model config (itself the record of its files).
        key_prefix: what the config calls these arguments, for messages:
            ``{key_prefix}pretrained``, ``{key_prefix}pretrained_cfg`` (``'image_'`` for
            M-CLIP's image tower).

    Raises:
        ValueError: an empty ``pretrained``, a file without ``pretrained_cfg``, a tag with a
            different one, unknown names.
    """
    given, record_key = f'{key_prefix}pretrained', f'{key_prefix}pretrained_cfg'
    if pretrained == '':  # an unset variable in --cfg-options: not a request for random weights
        raise ValueError(f"{given}='' names no weights: give a tag of {arch or 'the model'}, a "
                         'local file, or None for random weights')
    if pretrained and is_checkpoint_path(pretrained):
        if pretrained_cfg is None and arch is not None:
            tags = open_clip.list_pretrained_tags_by_model(arch)
            raise ValueError(
                f"{given}={pretrained!r} is a local file, which records no training "
                f"settings: set {record_key} to the {arch} tag it was trained as (one of "
                f"{tags}; 'openai' for OpenAI's released {arch}.pt), or to a dict of "
                f'{list(RECORD_FIELDS)} (e.g. dict(quick_gelu=False) for weights trained with '
                f"{arch}'s own config)")
        return pretrained_record(arch, pretrained_cfg, model_cfg, record_key)
    if pretrained:
        if pretrained_cfg is not None and not (
                isinstance(pretrained_cfg, str)
                and _clean_tag(pretrained_cfg) == _clean_tag(pretrained)):
            raise ValueError(f"{record_key}={pretrained_cfg!r} contradicts the tag "
                             f"{given}={pretrained!r}, whose own record applies; drop "
                             f'{record_key} (it is for local files)')
        return pretrained_record(arch, pretrained, model_cfg, given)
    return pretrained_record(arch, pretrained_cfg, model_cfg, record_key)


def resolve_pretrained(arch: str | None, pretrained: str | None,
                       pretrained_cfg: str | Mapping[str, Any] | None = None,
                       model_cfg: Mapping[str, Any] | None = None, key_prefix: str = '',
                       ) -> tuple[PretrainedRecord, Path | None]:
    """:func:`record_for` and the local weight file to load (``None``: a tag or random).

    Raises:
        UserError: a checkpoint path that is missing or unreadable
            (:func:`check_pretrained_file`).
    """
    record = record_for(arch, pretrained, pretrained_cfg, model_cfg, key_prefix)
    return record, check_pretrained_file(pretrained, f'{key_prefix}pretrained')


def check_pretrained_file(pretrained: str | None, key: str) -> Path | None:
    """The local file (or hub snapshot folder) a ``pretrained`` value names, checked as every
    file a user gives is (:func:`~xmr.utils.cli.given_file`); ``None`` for a tag or random
    weights. The backbone's
    ``check_config`` calls it as the config loads, before the runner writes its work dir.

    Raises:
        UserError: missing or unreadable, naming the path and ``key``.
    """
    if not (pretrained and is_checkpoint_path(pretrained)):
        return None
    given_file(pretrained, key, "give a local open_clip checkpoint file or hub snapshot folder, "
               "or a pretrained tag of the arch ('openai'; docs/pretrained_weights.md)",
               folder_ok=True)
    return Path(pretrained)


def build_open_clip(arch: str | None, pretrained: str | None = None,
                    pretrained_cfg: str | Mapping[str, Any] | None = None,
                    model_cfg: Mapping[str, Any] | None = None, key_prefix: str = '',
                    ) -> tuple[nn.Module, PretrainedRecord]:
    """An ``open_clip.CLIP`` (or ``CustomTextCLIP``, ``CoCa``: :func:`_clip_cfg`) with the record's
    activation and preprocessing, weights loaded.

    A tag's weights come through ``open_clip.pretrained.download_pretrained`` (open_clip's
    cache) and, like a local file, are read by :func:`read_clip_weights` and loaded strictly
    (keys and shapes checked before anything is copied). Built inside
    ``with torch.device('meta')`` the model takes no memory, and loading checks keys and shapes.

    ``key_prefix``: what the config calls ``pretrained`` / ``pretrained_cfg``, for messages
    (:func:`record_for`).

    Returns:
        ``(model, record)``; ``model.visual.preprocess_cfg`` is the record's.

    Raises:
        FileNotFoundError: a tag's weights, or a Hugging Face text encoder's config, could not
            be fetched (offline), with the local route.
        WeightsMismatchError: weights of another architecture (keys named, with counts).
        UnknownOptionError, ValueError: a ``model_cfg`` open_clip's build would refuse
            (:func:`check_model_cfg`).
    """
    if model_cfg is not None:
        check_model_cfg(model_cfg)
    record, weights = resolve_pretrained(arch, pretrained, pretrained_cfg, model_cfg,
                                         key_prefix)
    model_cls, cfg = _clip_cfg(arch, model_cfg, record.quick_gelu)
    if pretrained and weights is None:
        weights = _download(arch, pretrained, key_prefix)
    # Read before building: a broken file fails fast, before a large model is initialised.
    weights, state_dict = (read_clip_weights(weights, record) if weights is not None
                           else (None, None))
    model = _build_model(model_cls, cfg, record)
    if state_dict is not None:
        for key in ('logit_scale', 'logit_bias'):  # a scalar in some releases, [1] in others
            held = getattr(model, key, None)
            if key in state_dict and held is not None and state_dict[key].numel() == 1:
                state_dict[key] = state_dict[key].reshape(held.shape)
        # Hugging Face text towers saved with transformers < 4.31 (the XLM-R and RoBERTa CLIPs'
        # releases) hold their position ids as a buffer, no longer one; open_clip drops it too.
        if POSITION_IDS in state_dict and POSITION_IDS not in model.state_dict():
            del state_dict[POSITION_IDS]
        _drop_saved_sinusoids(state_dict, model, weights)
        check_weights_fit(model.state_dict(), state_dict, str(weights), f'open_clip {record.arch}',
                          _mismatch_fix(model, state_dict, record.arch))
        model.load_state_dict(state_dict, strict=True)
    set_model_preprocess_cfg(model, record.preprocess_cfg())
    return model, record


def apply_image_record(backbone: nn.Module, record: PretrainedRecord) -> None:
    """Give a backbone on an open_clip image tower its weights' image settings.

    The input size and mean/std feed the data preprocessor; the resize mode, interpolation and
    fill colour feed :meth:`~xmr.models.backbones.base.VisionLanguageBackbone.media_transform`,
    as open_clip's ``create_model_and_transforms`` builds its transform from the same record
    (a SigLIP tag's ``squash`` included).
    """
    backbone.image_size = record.image_size
    backbone.image_mean, backbone.image_std = record.mean, record.std
    backbone.image_resize_mode = record.resize_mode
    backbone.image_interpolation = record.interpolation
    backbone.image_fill_color = record.fill_color


def _build_model(model_cls: type, cfg: dict[str, Any], record: PretrainedRecord) -> nn.Module:
    """``model_cls(**cfg)``; a Hugging Face text encoder's config that cannot be fetched
    (offline, not in the cache) is told as a missing file naming the encoder and the local
    routes (transformers' own error names neither)."""
    hf_name = cfg['text_cfg'].get('hf_model_name')
    if not hf_name:
        return model_cls(**cfg)
    return fetch_weights(
        lambda: model_cls(**cfg),
        f"the config of the Hugging Face text encoder '{hf_name}' of open_clip {record.arch}",
        f'put it in the Hugging Face cache once (huggingface-cli download {hf_name} '
        'config.json), or give the architecture as model_cfg=<its open_clip config> with '
        'text_cfg.hf_model_name=<a folder holding its config.json> (docs/backbones.md)')


#: open_clip's position tables, which its training's --force-image-size and
#: --force-context-length resize (``positional_embedding``: ``CLIP``'s text tower).
_POSITION_TABLES = ('visual.positional_embedding', 'positional_embedding',
                    'text.positional_embedding')


def _mismatch_fix(model: nn.Module, state_dict: Mapping[str, torch.Tensor], arch: str) -> str:
    """How to fit weights that do not fit ``model``: the model's size for weights that differ
    in a position table alone (trained with open_clip's ``--force-image-size`` or
    ``--force-context-length``), else the architecture they were trained as.

    open_clip's ``load_checkpoint`` interpolates such a table to the model's size; the towers
    would then run on positions they were not trained with, so the size is given instead.
    """
    expected = model.state_dict()
    differing = {key for key in expected.keys() | state_dict.keys()
                 if key not in expected or key not in state_dict
                 or expected[key].shape != state_dict[key].shape}
    foreign = transformers_layout_key(state_dict)
    if foreign:
        return (f"Its keys are in Hugging Face transformers' layout ({foreign}), which open_clip "
                'does not read: give the open_clip file of the same weights '
                '(open_clip_model.safetensors or open_clip_pytorch_model.bin of an open_clip '
                'hub repository, or the pretrained tag; docs/pretrained_weights.md)')
    if 'patch_embed.proj.weight' in state_dict:
        return ("It is timm's image tower alone (patch_embed.proj.weight: the model.safetensors "
                'of a timm/ hub repository), without the text tower: give the '
                'open_clip_model.safetensors of the same repository, or the pretrained tag')
    # A table missing from the file is no table of another size.
    if not differing or not differing <= set(_POSITION_TABLES) & state_dict.keys():
        return (f'Is it a checkpoint of {arch}? Set arch to the architecture it was trained as '
                '(e.g. ViT-B-16 for ViT-B-16.pt)')
    sizes = [_trained_size(model, key, state_dict[key].shape[0]) for key in sorted(differing)]
    config = f"open_clip.get_model_config('{arch}')" if arch != 'custom' else 'your model_cfg'
    return (f"{'; '.join(text for text, _ in sizes)}. open_clip's load_checkpoint would "
            "interpolate the table to the model's size, running the tower on positions it was "
            f'not trained with; build the model at the file\'s size: model_cfg=<{config} with '
            f"{', '.join(setting for _, setting in sizes)}> (docs/pretrained_weights.md)")


def _trained_size(model: nn.Module, key: str, rows: int) -> tuple[str, str]:
    """What a position table of ``rows`` rows says of the size it was trained at, and the
    ``model_cfg`` setting of that size."""
    if not key.startswith('visual.'):
        # CoCa's text tower appends a class token: a position beyond its context length.
        context = rows - (model.state_dict()[key].shape[0] - model.context_length)
        return (f'{key} holds {rows} positions: the file was trained with context length '
                f'{context} (open_clip\'s --force-context-length {context})',
                f'text_cfg.context_length={context}')
    grid_height, grid_width = model.visual.grid_size
    extra = model.visual.positional_embedding.shape[0] - grid_height * grid_width  # class token
    side, patch = math.isqrt(rows - extra), model.visual.patch_size[0]
    size = side * patch
    if side * side != rows - extra:
        return (f'{key} holds {rows - extra} patch positions, the model {grid_height} x '
                f"{grid_width}: the file was trained at another image size (open_clip's "
                '--force-image-size)', 'vision_cfg.image_size=<that size>')
    return (f'{key} holds a {side} x {side} grid of {patch}-pixel patches: the file was trained '
            f"at image size {size} (open_clip's --force-image-size {size}), the model takes "
            f'{grid_height * patch}', f'vision_cfg.image_size={size}')


#: A buffer that Hugging Face text towers saved before transformers 4.31.
POSITION_IDS = 'text.transformer.embeddings.position_ids'
#: The name M2M100 encoders (NLLB-CLIP's text tower) give their sinusoid table.
SINUSOIDS = 'embed_positions.weights'


def _drop_saved_sinusoids(state_dict: dict[str, torch.Tensor], model: nn.Module,
                         source: Path) -> None:
    """Drop from ``state_dict`` the M2M100 sinusoid tables (``text.transformer.embed_positions
    .weights`` in NLLB-CLIP's files) that the model computes itself, refusing one that differs.

    transformers once kept the table as a frozen parameter, so files saved then hold it; it is
    now a buffer left out of the state dict and rebuilt from ``d_model`` and the padding id. The
    file's table is a copy of that computation, not a weight: dropping it changes nothing when
    it equals ``M2M100SinusoidalPositionalEmbedding.get_embedding`` (row ``p``:
    ``sin(p w_i)`` then ``cos(p w_i)``, ``w_i = 10000^(-i / (D/2 - 1))``, row ``pad_id`` zero)
    within the rounding of its dtype.

    Raises:
        WeightsMismatchError: a table of another shape, or values farther than that rounding,
            naming the file, the key, the shapes or the largest difference, and the fix.
    """
    saved_tables = [key for key in state_dict
                    if key.endswith(SINUSOIDS) and key not in model.state_dict()]
    if not saved_tables:
        return
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding

    modules = dict(model.named_modules())
    for key in saved_tables:
        module = modules.get(key.removesuffix('.weights'))
        if isinstance(module, M2M100SinusoidalPositionalEmbedding):  # else: named as unexpected
            _check_sinusoids(state_dict.pop(key), module, key, source)


def _check_sinusoids(saved: torch.Tensor, module: nn.Module, key: str, source: Path) -> None:
    """Refuse a saved table ``saved`` that is not the one ``module`` computes."""
    computed = type(module).get_embedding(*module.weights.shape, module.padding_idx)
    if saved.shape != computed.shape:
        problem = (f'a {list(saved.shape)} table where the model computes '
                   f'{list(computed.shape)}')
    else:
        difference = (saved.float() - computed).abs().max().item()
        # fp32 rounds sin(p w) to ~1e-4 near p = 1026 (NLLB's last row); 16 bits to their eps.
        if difference <= max(1e-3, torch.finfo(saved.dtype).eps):
            return
        problem = f'values up to {difference:.3g} away from the sinusoids the model computes'
    raise WeightsMismatchError(
        f'{source}: {key} holds {problem} (d_model {module.embedding_dim}, padding id '
        f'{module.padding_idx}): the file was saved from an M2M100 encoder of another config, '
        'or is damaged; set text_cfg.hf_model_name to the encoder config it was trained with, '
        'or download the file again')


def _clip_cfg(arch: str | None, model_cfg: Mapping[str, Any] | None,
              quick_gelu: bool) -> tuple[type, dict[str, Any]]:
    """The open_clip model class and its keyword arguments (built directly, not through
    ``create_model``, so that it also builds on the meta device; preprocessing is the record's
    business).

    ``open_clip.CLIP`` for OpenAI-style text towers, ``open_clip.CustomTextCLIP`` when the config
    asks for it (``custom_text``: SigLIP, SigLIP 2, MobileCLIP) or names a Hugging Face text
    encoder (``text_cfg.hf_model_name``: XLM-R, RoBERTa), ``open_clip.CoCa`` with a
    ``multimodal_cfg`` (its contrastive towers are used; the captioning decoder is built, since
    the checkpoint holds it, and never run). A Hugging Face encoder is built from its config
    (``hf_model_pretrained=False``): the CLIP checkpoint holds its trained weights, and the
    encoder's own pre-CLIP weights would be overwritten anyway.
    """
    cfg = {**_model_cfg(arch, model_cfg), 'quick_gelu': quick_gelu}
    text_cfg = dict(cfg.get('text_cfg', {}))
    custom = bool(cfg.pop('custom_text', False)) or bool(text_cfg.get('hf_model_name'))
    if text_cfg.get('hf_model_name'):
        text_cfg['hf_model_pretrained'] = False
    cfg['text_cfg'] = text_cfg
    cfg.pop('preprocess_cfg', None)
    if cfg.get('multimodal_cfg'):
        return open_clip.CoCa, cfg
    return (open_clip.CustomTextCLIP if custom else open_clip.CLIP), cfg


def check_model_cfg(model_cfg: Mapping[str, Any]) -> None:
    """Refuse, as the config loads, what open_clip's build of ``model_cfg`` refused after the
    runner had made its work dir, with Python's messages naming no key: an option its model
    class or tower configs do not take (``text_cfg.widht``), a value of another kind
    (``embed_dim='abc'``), and a transformer tower whose width its heads do not divide.

    Raises:
        UnknownOptionError: naming ``model_cfg.<key>``, the option and the ones taken.
        ValueError: naming ``model_cfg.<key>``, the value and what it must be.
    """
    from open_clip.coca_model import MultimodalCfg
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg

    model_cls, cfg = _clip_cfg(None, model_cfg, quick_gelu=False)
    towers = {'vision_cfg': CLIPVisionCfg, 'text_cfg': CLIPTextCfg,
              'multimodal_cfg': MultimodalCfg}
    MODELS.check_options({'type': model_cls, **{key: value for key, value in cfg.items()
                                                 if key not in towers}}, where='model_cfg')
    for name, kind in towers.items():
        if isinstance(cfg.get(name), Mapping):
            MODELS.check_options({'type': kind, **cfg[name]}, where=f'model_cfg.{name}')
    text = CLIPTextCfg(**cfg.get('text_cfg', {}))
    if not text.hf_model_name and text.width % text.heads:
        raise ValueError(f'model_cfg.text_cfg: width {text.width} is not divisible by heads '
                         f'{text.heads} (each head takes width / heads of the features)')
    vision = CLIPVisionCfg(**cfg.get('vision_cfg', {}))
    heads = vision.width // vision.head_width
    if not vision.timm_model_name and isinstance(vision.layers, int) and (
            heads == 0 or vision.width % heads):
        raise ValueError(f'model_cfg.vision_cfg: width {vision.width} makes {heads} heads of '
                         f'head_width {vision.head_width} (width // head_width), which must be '
                         'at least one and divide the width')


def arch_text_cfg(arch: str | None, model_cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``text_cfg`` of ``model_cfg``, else of open_clip's config of ``arch``, as written
    (open_clip's defaults left out).

    Raises:
        ValueError: neither or both given, or an architecture open_clip does not name.
    """
    return _model_cfg(arch, model_cfg).get('text_cfg', {})


def arch_embed_dim(arch: str | None, model_cfg: Mapping[str, Any] | None) -> int:
    """``embed_dim`` of ``model_cfg``, else of open_clip's config of ``arch``: the width
    ``E`` the text projection maps to (raises as :func:`arch_text_cfg` does)."""
    return _model_cfg(arch, model_cfg)['embed_dim']


def hf_tokenizer_name(arch: str | None, model_cfg: Mapping[str, Any] | None) -> str | None:
    """``text_cfg.hf_tokenizer_name`` of an architecture, ``None`` for CLIP's BPE."""
    return arch_text_cfg(arch, model_cfg).get('hf_tokenizer_name') or None


def text_tokenizer_cfg(arch: str | None, model_cfg: Mapping[str, Any] | None,
                       language_token: bool = False) -> dict[str, Any] | None:
    """The ``HFTokenizer`` config of an architecture whose text tower reads a Hugging Face
    tokenizer (``text_cfg.hf_tokenizer_name``: SigLIP, CLIPA, XLM-R CLIPs), ``NLLBTokenizer``
    for a tower that reads a language-code token (``language_token``: nllb-clip), or ``None``
    for CLIP's BPE.

    open_clip's tokenizer options are carried over: ``tokenizer_kwargs.clean`` (its text
    cleaning, ``'whitespace'`` by default; SigLIP's ``'canonicalize'``) and
    ``strip_sep_token`` (CLIPA).

    Raises:
        ValueError: a ``tokenizer_mode`` or tokenizer option xmr's ``HFTokenizer`` does not
            reproduce, named with the architecture.
    """
    name = hf_tokenizer_name(arch, model_cfg)
    if not name:
        return None
    text_cfg = arch_text_cfg(arch, model_cfg)
    options = dict(text_cfg.get('tokenizer_kwargs') or {})
    mode = text_cfg.get('tokenizer_mode')
    reproduced = {'clean'} if language_token else {'clean', 'strip_sep_token'}
    unknown = sorted(set(options) - reproduced)
    if mode or unknown:
        kind = 'NLLBTokenizer' if language_token else 'HFTokenizer'
        raise ValueError(f"open_clip architecture '{arch or 'custom'}' tokenizes with "
                         f'tokenizer_mode={mode!r}, tokenizer_kwargs {unknown}, which xmr\'s '
                         f'{kind} does not reproduce; pass a tokenizer config that does')
    clean = options.get('clean', 'whitespace')
    if language_token:
        return dict(type='NLLBTokenizer', name_or_path=name, clean=clean)
    return dict(type='HFTokenizer', name_or_path=name, clean=clean, lowercase=False,
                strip_sep_token=bool(options.get('strip_sep_token', False)))


#: The options of a Hugging Face source tokenizer that change the ids a caption gets, which a
#: config may leave out but not set otherwise than the text tower was trained with.
TRAINED_TOKENIZER_FIELDS = ('clean', 'lowercase', 'strip_sep_token')


def settled_tokenizer_cfg(given: Mapping[str, Any] | None, default: Mapping[str, Any],
                          settled: tuple[str, ...], by: str) -> dict[str, Any]:
    """The config's tokenizer ``given`` (``default``, the one the weights were trained with,
    without it) with the ``settled`` fields of ``default`` filled in where it leaves them out; a
    tokenizer of another ``type`` as given. ``by`` names who settles them in messages
    (``"open_clip tag 'openai' of ViT-B-32 records"``).

    Raises:
        ValueError: ``given`` sets a settled field otherwise (field, the config's value and
            ``default``'s).
    """
    if not given:
        return dict(default)
    cfg = dict(given)
    if cfg.get('type') != default['type']:
        return cfg
    for field in (field for field in settled if field in default):
        cfg.setdefault(field, default[field])
        if cfg[field] != default[field]:
            raise ValueError(f'tokenizer.{field}: the config sets {cfg[field]!r}, {by} '
                             f'{default[field]!r}; leave {field} out (the backbone fills it in)')
    return cfg


def _download(arch: str, tag: str, key_prefix: str) -> Path:
    cfg = open_clip.get_pretrained_cfg(arch, tag)
    hub = cfg.get('hf_hub', '').rstrip('/')
    source = f'hf-hub:{hub}' if hub else cfg.get('url') or 'open_clip'
    given, record_key = f'{key_prefix}pretrained', f'{key_prefix}pretrained_cfg'
    return Path(fetch_weights(
        lambda: open_clip.pretrained.download_pretrained(cfg),
        f"the '{tag}' weights of {arch} ({source})",
        f"download them once and set {given}=<local file> with {record_key}='{tag}' "
        f'(--cfg-options model.backbone.{given}=FILE model.backbone.{record_key}={tag}; '
        'docs/pretrained_weights.md)',
        failures=(OSError, RuntimeError)))  # open_clip's checksum mismatch is a RuntimeError


def read_clip_weights(path: str | Path, record: PretrainedRecord
                      ) -> tuple[Path, dict[str, torch.Tensor]]:
    """The file a CLIP checkpoint ``path`` names, and its state dict (plain, safetensors or
    OpenAI's TorchScript archive) in open_clip's names: the archive's non-weight attributes
    dropped. In a folder (a hub snapshot), open_clip's own files come first: timm's repositories
    of open_clip models also hold the image tower alone as ``model.safetensors``.

    Raises:
        ValueError: a truncated or non-checkpoint file.
    """
    what = f'{record.arch} CLIP checkpoint'
    path = weights_file(path, what, OPEN_CLIP_WEIGHT_FILES + HF_WEIGHT_FILES)
    state_dict = read_weights(path, what)
    for key in _OPENAI_JIT_ATTRIBUTES:
        state_dict.pop(key, None)
    return path, state_dict


def record_tokenizer_cfg(record: PretrainedRecord, tokenizer: Mapping[str, Any] | None,
                         ) -> dict[str, Any]:
    """The source tokenizer's config, ``OpenCLIPTokenizer``'s ``model_name`` and ``max_length``
    filled from the record (``pad_to`` and the like are kept).

    Raises:
        ValueError: ``model_name`` / ``max_length`` that contradict the record (field, config's
            value, record's value).
    """
    return settled_tokenizer_cfg(
        tokenizer, dict(type='OpenCLIPTokenizer', model_name=record.tokenizer,
                        max_length=record.context_length),
        ('model_name', 'max_length'), f'{record.source} of {record.arch} records')


def check_record_tokenizer(record: PretrainedRecord, tokenizer: object) -> None:
    """Refuse a built source tokenizer that is not the record's, naming the field.

    Raises:
        ValueError: another tokenizer class, or ``model_name`` / ``max_length`` that contradict
            the record (field, config's value, record's value).
    """
    if not isinstance(tokenizer, OpenCLIPTokenizer):
        raise ValueError(f'tokenizer.type: the config builds a {type(tokenizer).__name__}, but '
                         f"the text tower of {record.arch} was trained with open_clip's "
                         "tokenizer; use 'OpenCLIPTokenizer' (or leave tokenizer out)")
    record_tokenizer_cfg(record, dict(type='OpenCLIPTokenizer', model_name=tokenizer.model_name,
                                      max_length=tokenizer.max_length))


def check_record_context(tokenizer: object, record: PretrainedRecord) -> None:
    """Refuse a Hugging Face source tokenizer (XLM-R, NLLB, mT5 CLIPs) whose ``max_length``
    exceeds the record's ``context_length``: open_clip cuts these towers' captions to
    ``text_cfg.context_length`` tokens (77 unless the config says otherwise) in training and
    evaluation, while the encoder's position table is longer (XLM-R's 512), so a longer caption
    would run the frozen tower on positions its CLIP training never saw.

    Refused, not cut to the record: the number a config gives is the one its run's config dump
    and results are read against, and a context other than the one asked for would be silent.

    Raises:
        ValueError: naming ``max_length``, the record's ``context_length`` and its source.
    """
    if tokenizer.max_length > record.context_length:
        raise ValueError(
            f'tokenizer.max_length={tokenizer.max_length} exceeds the context_length '
            f"{record.context_length} of {record.arch}'s record ({record.source}; open_clip's "
            'text_cfg.context_length: open_clip cuts its captions there, so its text tower was '
            f'trained on none longer); set max_length <= {record.context_length}, or leave it '
            f'out for {record.context_length}')


def check_trained_tokenizer(tokenizer: object, trained: Mapping[str, Any], arch: str) -> None:
    """Refuse a built source tokenizer of another kind than the Hugging Face tokenizer the text
    tower was trained with (``trained``, :func:`text_tokenizer_cfg`), as
    :func:`check_record_tokenizer` refuses one for a tower trained on CLIP's BPE: CLIP's BPE or
    a SentencePiece model of one's own fits a tower's table and context and gives other ids for
    the same pieces.

    Raises:
        ValueError: a tokenizer that is not a ``trained['type']`` (a subclass neither), naming
            its class, the architecture and the tokenizer it was trained with; or one reading
            captions otherwise (:data:`TRAINED_TOKENIZER_FIELDS`), naming the field.
    """
    expected = {'HFTokenizer': HFTokenizer, 'NLLBTokenizer': NLLBTokenizer}[trained['type']]
    # Not isinstance: a subclass (CCLM's, which lower-cases, strips punctuation and keeps 30
    # words) reads the same vocabulary into other ids.
    if type(tokenizer) is not expected:
        raise ValueError(f'tokenizer.type: the config builds a {type(tokenizer).__name__}, but '
                         f'the text tower of {arch} was trained with the Hugging Face tokenizer '
                         f"'{trained['name_or_path']}'; use '{trained['type']}' (name_or_path, "
                         'or tokenizer_file=<its tokenizer.json> offline) or leave tokenizer out')
    for field in TRAINED_TOKENIZER_FIELDS:
        if field in trained and getattr(tokenizer, field) != trained[field]:
            raise ValueError(f'tokenizer.{field}: the tokenizer has {getattr(tokenizer, field)!r}, '
                             f'but the text tower of {arch} was trained on text read with '
                             f'{trained[field]!r}; leave {field} out (the backbone fills it in)')
