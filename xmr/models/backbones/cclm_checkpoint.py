"""Reading an official CCLM checkpoint and renaming it onto the dual-stream backbone.

CCLM (zengyan-97/CCLM) saves ``{'model': state_dict, ...}`` (or the bare state dict) with

* ``vision_encoder.*``: Microsoft's Swin naming, where the patch merging that halves the grid is
  ``layers.{i}.downsample`` at the *end* of stage ``i``; timm puts the same module at the *start*
  of stage ``i + 1``. The bias tables follow the pre-training window and are resampled when the
  configured window differs; ``relative_position_index`` and ``attn_mask`` are buffers that timm
  rebuilds for its window.
* ``text_encoder.bert.*`` (pre-training, ``BertForMaskedLM``) or ``text_encoder.*`` (a retrieval
  fine-tune, ``BertModel``): embeddings and 12 layers, the upper ones with ``crossattention.*``
  (the fusion encoder). The dual-stream model keeps the text-only layers.
* ``vision_proj`` / ``text_proj`` (Linear 1024 -> 256), ``temp`` (kept as the backbone's
  ``temperature`` buffer), and the fusion-side heads
  ``itm_head``, ``bbox_head``, ``text_encoder.cls`` (MLM).

:func:`convert_cclm_state_dict` maps these names onto the backbone's own
(``vision.*``, ``vision_proj.*``, ``text_tower.*``) and says what happened to every key.
"""
from __future__ import annotations

import math
import pickle
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from xmr.models.backbones.relative_position import resize_relative_position_bias, table_side
from xmr.models.weight_files import refuse_foreign_file, unreadable_file
from xmr.utils.listing import first_few

_SWIN_BLOCK = re.compile(r'^vision_encoder\.layers\.(\d+)\.blocks\.(\d+)\.(.+)$')
_SWIN_DOWNSAMPLE = re.compile(r'^vision_encoder\.layers\.(\d+)\.downsample\.(.+)$')
_TEXT = re.compile(r'^text_encoder\.(?:bert\.)?(embeddings|encoder|pooler)\.(.+)$')
_TEXT_LAYER = re.compile(r'^layer\.(\d+)\.(.+)$')

#: Top-level prefixes whose presence identifies a CCLM (X-VLM family) checkpoint.
_REQUIRED_PREFIXES = ('vision_encoder.', 'text_encoder.', 'text_proj.')

#: Keys the dual-stream model deliberately leaves out, by prefix, with the reason reported.
_DROPPED_PREFIXES = {
    'itm_head.': 'image-text matching head of the fusion encoder',
    'bbox_head.': 'box head of the fusion encoder',
    'text_encoder.cls.': 'masked-language-model head',
    'vision_encoder.head.': 'image-classification head',
}

_SWIN_BUFFERS = ('attn.relative_position_index', 'attn_mask')


@dataclass
class CheckpointReport:
    """What the conversion did with every key of a checkpoint.

    Attributes:
        source: where the state dict came from (a file path, or ``'<state dict>'``).
        used: checkpoint key -> backbone key it was loaded into.
        dropped: checkpoint key -> why the dual-stream model does not need it.
        missing: backbone keys the checkpoint did not provide.
        unexpected: checkpoint keys that are neither used nor known to be unneeded.
        resized: checkpoint bias table -> (its window, the configured window) it was
            resampled from and to.
    """

    source: str
    used: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    resized: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """True when every backbone weight was found and no key was left unexplained."""
        return not self.missing and not self.unexpected

    def summary(self, limit: int = 8) -> str:
        """A few lines for the log: counts, then the first ``limit`` keys of each problem."""
        reasons: dict[str, int] = {}
        for reason in self.dropped.values():
            reasons[reason] = reasons.get(reason, 0) + 1
        lines = [f'CCLM checkpoint {self.source}: {len(self.used)} keys used, '
                 f'{len(self.dropped)} dropped, {len(self.missing)} missing, '
                 f'{len(self.unexpected)} unexpected, {len(self.resized)} bias tables resized']
        lines += [f'  dropped {count}: {reason}' for reason, count in sorted(reasons.items())]
        for title, keys in (('missing', self.missing), ('unexpected', self.unexpected)):
            if keys:
                lines.append(f'  {title}: {first_few(keys, limit)}')
        return '\n'.join(lines)


def read_cclm_checkpoint(path: str | Path, weights_only: bool = True) -> dict[str, torch.Tensor]:
    """Load the state dict of a CCLM checkpoint file (``torch.load(path)['model']`` or itself).

    Args:
        path: the ``.th`` / ``.pth`` file released with CCLM, or one saved by its fine-tuning.
        weights_only: refuse pickled Python objects (torch's safe loader). A trusted file that
            also pickles its training config needs ``False``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is truncated or damaged (a record failing its CRC-32), a Git LFS
            pointer or no torch file at all, cannot be read safely, or holds no CCLM state
            dict.
    """
    # xmr.engine imports the models: here, not at the top.
    from xmr.engine.checkpoint import check_archive_records, refused_global

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'CCLM checkpoint {path} does not exist')
    refuse_foreign_file(path, 'CCLM checkpoint')
    if zipfile.is_zipfile(path):
        # torch.load checks no record's CRC-32: a damaged tensor would load as other numbers.
        check_archive_records(path, 'CCLM checkpoint')
    try:
        loaded = torch.load(path, map_location='cpu', weights_only=weights_only)
    except pickle.UnpicklingError as error:
        refused = refused_global(error) or str(error).strip().splitlines()[0]
        raise ValueError(f'{path} pickles objects that the safe loader refuses ({refused}); if '
                         'you trust the file, set checkpoint_weights_only=False on the '
                         'CCLMDualStream backbone (weights_only=False here)') from error
    except (RuntimeError, EOFError) as error:  # a cut-off archive has no central directory
        raise ValueError(unreadable_file(path, 'CCLM checkpoint', error)) from error
    if isinstance(loaded, Mapping) and isinstance(loaded.get('model'), Mapping):
        loaded = loaded['model']
    check_cclm_state_dict(loaded, str(path))
    return dict(loaded)


def check_cclm_state_dict(state_dict: object, source: str = '<state dict>') -> None:
    """Raise a ``ValueError`` naming ``source`` unless it looks like a CCLM state dict."""
    if not isinstance(state_dict, Mapping):
        raise ValueError(f'{source} is not a CCLM checkpoint: expected a state dict (or a dict '
                         f"with one under 'model'), got {type(state_dict).__name__}")
    keys = [key for key in state_dict if isinstance(key, str)]
    absent = [prefix for prefix in _REQUIRED_PREFIXES
              if not any(key.startswith(prefix) for key in keys)]
    if absent:
        found = sorted({key.split('.', 1)[0] for key in keys})[:12]
        raise ValueError(f'{source} is not a CCLM checkpoint: it has no keys under '
                         f'{absent} (top-level names found: {found})')
    not_tensors = [key for key, value in state_dict.items() if not isinstance(value, torch.Tensor)]
    if not_tensors:
        raise ValueError(f'{source} is not a CCLM checkpoint: {not_tensors[:5]} are not tensors')


def fusion_start(state_dict: Mapping[str, torch.Tensor]) -> int | None:
    """Index of the first text layer with cross-attention (6 in CCLM), or ``None``."""
    layers = []
    for key in state_dict:
        match = _TEXT.match(key)
        if match and match.group(1) == 'encoder':
            layer = _TEXT_LAYER.match(match.group(2))
            if layer and layer.group(2).startswith('crossattention.'):
                layers.append(int(layer.group(1)))
    return min(layers) if layers else None


def _vision_key(key: str, report: CheckpointReport) -> str | None:
    """Backbone name of a ``vision_encoder.*`` key, or ``None`` after recording a drop."""
    block = _SWIN_BLOCK.match(key)
    if block:
        stage, index, rest = block.groups()
        if rest in _SWIN_BUFFERS:
            report.dropped[key] = 'Swin buffer rebuilt for the configured window'
            return None
        return f'vision.layers.{stage}.blocks.{index}.{rest}'
    downsample = _SWIN_DOWNSAMPLE.match(key)
    if downsample:
        # Microsoft: merging at the end of stage i; timm: at the start of stage i + 1.
        stage, rest = downsample.groups()
        return f'vision.layers.{int(stage) + 1}.downsample.{rest}'
    return 'vision.' + key[len('vision_encoder.'):]


def _text_key(key: str, num_layers: int, first_fusion: int | None,
              report: CheckpointReport) -> str | None:
    """Backbone name of a ``text_encoder.*`` key, or ``None`` after recording a drop."""
    match = _TEXT.match(key)
    if match is None:
        return key
    part, rest = match.groups()
    if part == 'pooler':
        report.dropped[key] = 'BERT pooler (CCLM pools token 0 without it)'
        return None
    if part == 'embeddings':
        if rest in ('position_ids', 'token_type_ids'):
            report.dropped[key] = 'index buffer (positions 0..L-1 are rebuilt)'
            return None
        return f'text_tower.embeddings.{rest}'
    layer = _TEXT_LAYER.match(rest)
    if layer is None:
        return key
    index, inner = int(layer.group(1)), layer.group(2)
    if first_fusion is not None and index >= first_fusion:
        report.dropped[key] = 'fusion layer (cross-attention to the image)'
        return None
    if index >= num_layers:
        report.dropped[key] = f'text layer beyond the {num_layers} configured'
        return None
    return f'text_tower.layers.{index}.{inner}'


def convert_cclm_state_dict(state_dict: Mapping[str, torch.Tensor],
                            expected: Mapping[str, torch.Tensor], num_text_layers: int,
                            bias_interpolation: str = 'bicubic', source: str = '<state dict>'
                            ) -> tuple[dict[str, torch.Tensor], CheckpointReport]:
    """Rename a CCLM state dict onto the dual-stream backbone.

    Args:
        state_dict: the checkpoint's state dict (see :func:`read_cclm_checkpoint`).
        expected: the backbone's own state dict; gives the names to fill and their shapes.
        num_text_layers: text layers the backbone keeps; all must precede the fusion layers.
        bias_interpolation: how bias tables reach the configured window (see
            :func:`resize_relative_position_bias`).
        source: name of the checkpoint, for messages.

    Returns:
        The renamed state dict (only keys of ``expected``) and the :class:`CheckpointReport`.

    Raises:
        ValueError: not a CCLM state dict, a kept text layer has cross-attention, or a tensor's
            shape does not fit the configured backbone.
    """
    check_cclm_state_dict(state_dict, source)
    first_fusion = fusion_start(state_dict)
    if first_fusion is not None and num_text_layers > first_fusion:
        raise ValueError(f'{source}: text layers {first_fusion}..{num_text_layers - 1} are '
                         'fusion layers (they cross-attend to the image); a dual-stream text '
                         f'encoder keeps at most {first_fusion} layers, got '
                         f'text.num_layers={num_text_layers}')
    report = CheckpointReport(source=source)
    converted: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        dropped = next((reason for prefix, reason in _DROPPED_PREFIXES.items()
                        if key.startswith(prefix)), None)
        if dropped is not None:
            report.dropped[key] = dropped
            continue
        if key.startswith('vision_encoder.'):
            target = _vision_key(key, report)
        elif key.startswith('text_encoder.'):
            target = _text_key(key, num_text_layers, first_fusion, report)
        elif key.startswith('text_proj.'):
            target = 'text_tower.' + key
        elif key == 'temp':
            target = 'temperature'
        else:
            target = key
        if target is None:
            continue
        if target not in expected:
            report.unexpected.append(key)
            continue
        want = expected[target].shape
        if target.endswith('relative_position_bias_table') and value.shape != want:
            window = (math.isqrt(want[0]) + 1) // 2
            value = resize_relative_position_bias(value, window, bias_interpolation, key)
            report.resized[key] = ((table_side(state_dict[key], key) + 1) // 2, window)
        if value.shape != want:
            raise ValueError(f'{source}: {key} has shape {tuple(value.shape)} but the '
                             f'configured backbone expects {tuple(want)} for {target}')
        converted[target] = value
        report.used[key] = target
    report.missing = sorted(set(expected) - set(converted))
    return converted, report
