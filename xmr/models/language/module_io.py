"""Per-language modules: save one language's trained parameters, load several into one model.

A language's module is everything the target branch holds for that language alone: the adapters
of ``language_branch.adapters.sets[lang]`` (LoRA, Houlsby, Compacter with its shared rule,
prompts). The frozen towers and anything shared by all languages stay out, so a module file is
small (PECTVLM saves only the trainable parameters) and modules trained apart can be loaded side
by side into a model built for all their languages.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from xmr.fileio import atomic_torch_save

__all__ = ['MODULE_FORMAT', 'LanguageShare', 'language_state_dict', 'load_language_module',
           'language_parameter_report', 'save_language_module']

MODULE_FORMAT = 'xmr-language-module'
MODULE_VERSION = 1


def _branch(model: nn.Module) -> nn.Module:
    """The target branch of a retriever (or the branch itself)."""
    model = getattr(model, 'module', model)
    branch = getattr(model, 'language_branch', model)
    if branch is None or not hasattr(branch, 'adapters'):
        raise TypeError(f'{type(model).__name__} has no target-language branch with per-language '
                        'modules')
    return branch


def _module(model: nn.Module, lang: str) -> nn.Module:
    adapters = _branch(model).adapters
    adapters.check_language(lang)
    return adapters.sets[lang]


def _facts(model: nn.Module) -> dict[str, Any]:
    """What a module file must agree on with the model it is loaded into."""
    model = getattr(model, 'module', model)
    branch = _branch(model)
    backbone = getattr(model, 'backbone', None)
    return dict(backbone=type(backbone).__name__ if backbone is not None else None,
                arch=getattr(backbone, 'arch', None), width=branch.tower.width,
                num_blocks=branch.num_blocks, routine=getattr(model, 'routine', None))


def language_state_dict(model: nn.Module, lang: str) -> dict[str, torch.Tensor]:
    """The parameters (and persistent buffers) of ``lang``'s module, keyed inside the module."""
    return {key: value.detach().cpu().clone()
            for key, value in _module(model, lang).state_dict().items()}


def save_language_module(model: nn.Module, lang: str, path: str | os.PathLike) -> Path:
    """Write ``lang``'s module to ``path`` (a small torch file), through a temporary file.

    The file holds the format tag, the language, the facts the receiving model must share
    (backbone, architecture, width, blocks, routine) and the module's state dict.

    Returns:
        The path written.
    """
    path = Path(path)
    payload = dict(format=MODULE_FORMAT, version=MODULE_VERSION, lang=lang,
                   facts=_facts(model), state_dict=language_state_dict(model, lang))
    atomic_torch_save(payload, path)
    return path


def load_language_module(model: nn.Module, path: str | os.PathLike,
                         lang: str | None = None) -> str:
    """Load a module file into the model's module of ``lang`` (default: the file's language).

    Loading is strict: the file's facts must match the model's and its keys and shapes must be
    exactly those of the target module, so a module can never land half-loaded or in a model
    whose frozen tower it was not trained on.

    Returns:
        The language loaded into.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a module file, facts that differ, or keys/shapes that differ (named).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'language module file {path} does not exist')
    payload = torch.load(path, map_location='cpu', weights_only=True)
    if not isinstance(payload, Mapping) or payload.get('format') != MODULE_FORMAT:
        raise ValueError(f'{path} is not an xmr language module file (format {MODULE_FORMAT!r})')
    target = lang or payload['lang']
    mine = _facts(model)
    differing = {k: (payload['facts'].get(k), v) for k, v in mine.items()
                 if payload['facts'].get(k) != v}
    if differing:
        details = '; '.join(f'{k}: file {a!r} vs model {b!r}' for k, (a, b) in differing.items())
        raise ValueError(f'{path} ({payload["lang"]}) does not fit this model: {details}')
    module = _module(model, target)
    expected = module.state_dict()
    state = payload['state_dict']
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    reshaped = sorted(k for k in set(state) & set(expected) if state[k].shape != expected[k].shape)
    if missing or unexpected or reshaped:
        raise ValueError(f'{path} ({payload["lang"]}) does not fit the {target} module: missing '
                         f'{missing[:5]}, unexpected {unexpected[:5]}, other shapes '
                         f'{reshaped[:5]}; was it trained with the same adapter config?')
    module.load_state_dict(state, strict=True)
    return target


@dataclass(frozen=True)
class LanguageShare:
    """The parameters one language adds (PECTVLM's Table 5 column).

    Attributes:
        parameters: parameter count of the language's module.
        of_text_encoder: ``parameters / text tower parameters`` (the frozen text encoder, as
            PECTVLM reports it).
        of_backbone: ``parameters / all frozen backbone parameters`` (text and image towers).
    """

    parameters: int
    of_text_encoder: float
    of_backbone: float


def language_parameter_report(model: nn.Module) -> dict[str, LanguageShare]:
    """``{lang: LanguageShare}`` for every language of the model's branch."""
    model = getattr(model, 'module', model)
    branch = _branch(model)
    text = sum(p.numel() for p in branch.tower.parameters())
    backbone = getattr(model, 'backbone', None)
    total = sum(p.numel() for p in backbone.parameters()) if backbone is not None else text
    report = {}
    for lang in branch.languages:
        count = sum(p.numel() for p in branch.adapters.sets[lang].parameters())
        report[lang] = LanguageShare(count, count / text, count / total)
    return report
