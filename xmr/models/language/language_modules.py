"""Per-language modules: save one language's trained parameters, load several into one model.

A language's module is everything the model holds for that language alone: the adapters of
``language_branch.adapters.sets[lang]`` (LoRA, Houlsby, Compacter with its shared rule,
prompts), its own copies of tower weights (PECTVLM's LayerNorms and head, FT's whole tower) and,
where DASD builds one per language (``per_language=True``, the paper configs), its own
disentangler. The frozen towers and anything shared by all languages stay out, so a module file
is small (PECTVLM saves only the trainable parameters) and modules trained apart can be loaded
side by side into a model built for all their languages.

What a module leaves out still shapes its output: a tower fine-tuned by ``source_finetune``, a
trained shared embedding table and ``W_e``, a disentangler shared by the languages. A module
file therefore names its base: the checkpoint it was exported from and a SHA-256 fingerprint of
every shared part of that model's state. Loading refuses a model whose shared parts differ
(naming them and the base checkpoint to build from), so a merged model reproduces each language
exactly or is not made.
"""
from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from xmr.datasets.languages import normalize_language
from xmr.engine.checkpoint import read_checkpoint, save_model_checkpoint
from xmr.engine.wrappers import unwrap_model
from xmr.fileio import atomic_torch_save
from xmr.models.adapters.base import BaseAdapter
from xmr.models.disentanglers.per_language import PerLanguageDisentangler
from xmr.models.weight_files import nonfinite_keys
from xmr.utils.cli import UserKeyError
from xmr.utils.listing import first_few
from xmr.version import provenance, written_by

__all__ = ['MODULE_FORMAT', 'LanguageShare', 'check_module_finite', 'language_state_dict',
           'load_language_module', 'language_parameter_report', 'module_file_problem',
           'save_language_module', 'save_merged_checkpoint', 'shared_fingerprints',
           'shared_parameter_count']

MODULE_FORMAT = 'xmr-language-module'
# Version 2 records the base (checkpoint and shared-state fingerprints) of the module; version 3
# keys its state by part ('adapters.', 'disentangler.': a language's own disentangler).
MODULE_VERSION = 3


def _branch(model: nn.Module) -> nn.Module:
    """The target branch of a retriever (or the branch itself)."""
    model = unwrap_model(model)
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
    model = unwrap_model(model)
    branch = _branch(model)
    backbone = getattr(model, 'backbone', None)
    disentangler = getattr(model, 'disentangler', None)
    first = next(iter(branch.adapters.sets.values()))
    return dict(backbone=type(backbone).__name__ if backbone is not None else None,
                arch=getattr(backbone, 'arch', None), width=branch.tower.width,
                num_blocks=branch.num_blocks, routine=getattr(model, 'routine', None),
                target_vocabulary=branch.tokenizer.vocabulary_digest(),
                # A module of other adapter types, or beside another disentangler, is told so
                # (its shared weights differing would send the user to a --base that cannot fit).
                adapters=sorted({type(module).__name__ for module in first.modules()
                                 if isinstance(module, BaseAdapter)}),
                # LoRA's alpha, an activation: the same weights under others compute otherwise.
                adapter_settings=branch.adapters.settings(),
                disentangler=None if disentangler is None else type(disentangler).__name__)


def shared_fingerprints(model: nn.Module) -> dict[str, str]:
    """SHA-256 of each shared part of the model's state: all but the per-language modules.

    Parts are the first two components of the state-dict keys (``backbone.clip``,
    ``language_branch.embedding``, ``disentangler.generator``, ...); the facts (``_extra_state``)
    are compared on their own.

    Returns:
        ``{part: hex digest}`` over each entry's key, dtype, shape and bytes.
    """
    model = unwrap_model(model)
    own = _per_language_containers(model)
    per_language = tuple(f'{name}.' for name, module in model.named_modules()
                         if any(module is container for container in own))
    digests = defaultdict(hashlib.sha256)
    for key, value in sorted(model.state_dict().items()):
        if key.startswith(per_language) or key.endswith('_extra_state'):
            continue
        digest = digests['.'.join(key.split('.')[:2])]
        digest.update(f'{key}|{value.dtype}|{tuple(value.shape)}'.encode())
        digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return {part: digest.hexdigest() for part, digest in digests.items()}


def language_state_dict(model: nn.Module, lang: str) -> dict[str, torch.Tensor]:
    """The parameters (and persistent buffers) of ``lang``'s module, keyed by part
    (:func:`_language_parts`) then inside it: ``adapters.<key>``, ``disentangler.<key>``."""
    return {f'{part}.{key}': value.detach().cpu().clone()
            for part, module in _language_parts(model, lang).items()
            for key, value in module.state_dict().items()}


def check_module_finite(model: nn.Module, lang: str) -> None:
    """Refuse to export ``lang``'s module when its weights hold NaN or infinite values: the run
    diverged before it saved, and every score of the language would come out NaN.

    Raises:
        ValueError: naming the language, the weights and the fix.
    """
    bad = nonfinite_keys(language_state_dict(model, normalize_language(lang, 'language')))
    if bad:
        raise ValueError(f'the {lang} module holds NaN or infinite weights '
                         f'({first_few(bad)}): its run diverged before this checkpoint was '
                         'saved; export from an earlier checkpoint of the run')


def save_language_module(model: nn.Module, lang: str, path: str | os.PathLike,
                         base_checkpoint: str | os.PathLike | None = None) -> Path:
    """Write ``lang``'s module (any spelling of its code, ``deu_Latn`` for ``de``) to ``path``
    (a small torch file), through a temporary file.

    The file holds the format tag, the language, the facts the receiving model must share
    (backbone, architecture, width, blocks, routine, target vocabulary, adapter and
    disentangler types), its base
    (``base_checkpoint``, the file the model was loaded from, and :func:`shared_fingerprints`
    of the model), the module's state and the xmr that wrote it
    (:func:`~xmr.version.provenance`).

    Returns:
        The path written.
    """
    lang = normalize_language(lang, 'save_language_module lang')
    check_module_finite(model, lang)
    base = dict(checkpoint=None if base_checkpoint is None else str(base_checkpoint),
                shared=shared_fingerprints(model))
    payload = dict(format=MODULE_FORMAT, version=MODULE_VERSION, lang=lang, facts=_facts(model),
                   base=base, state_dict=language_state_dict(model, lang), **provenance())
    return atomic_torch_save(payload, path)


def module_file_problem(path: str | os.PathLike, payload: Any) -> str | None:
    """What to do with a module file given where a model's checkpoint goes (``tools/test.py``,
    ``load_from``): ``'<path> is the language module of 'de' alone, ...: merge it into one
    first (...)'``; ``None`` when ``payload`` (the loaded file) is no module file."""
    if not isinstance(payload, Mapping) or payload.get('format') != MODULE_FORMAT:
        return None
    base = payload.get('base')
    source = base.get('checkpoint') if isinstance(base, Mapping) else None
    lang = payload.get('lang')
    return (f"{path} is the language module of {lang!r} alone, not a model's checkpoint: merge "
            'it into one first (tools/language_modules.py merge CONFIG '
            f'{f"--base {source} " if source else ""}--modules {lang}={path} --out merged.pth)')


def save_merged_checkpoint(model: nn.Module, path: str | os.PathLike,
                           meta: Mapping[str, Any]) -> Path:
    """Write the whole model as a checkpoint ``tools/test.py`` loads (``state_dict`` + ``meta``).

    Raises:
        ValueError: weights that hold NaN or infinite values (the modules were checked as they
            loaded: they came from ``meta['base']``), nothing written.
    """
    state = unwrap_model(model).state_dict()
    bad = nonfinite_keys(state)
    if bad:
        raise ValueError(f"{path} not written: {len(bad)} weights hold NaN or infinite values "
                         f"({first_few(bad)}), kept from the base checkpoint {meta.get('base')}, "
                         'whose run diverged before it saved; give an earlier checkpoint of '
                         'that run as --base')
    return save_model_checkpoint(path, state, meta)



def load_language_module(model: nn.Module, path: str | os.PathLike,
                         lang: str | None = None) -> str:
    """Load a module file into the model's module of ``lang`` (any spelling of its code;
    default: the file's language).

    Loading is strict: the file's facts and the fingerprints of its base's shared parts must
    match the model's, and its keys and shapes must be exactly those of the target module, so a
    module never lands half-loaded, or beside a tower, embedding or disentangler it was not
    trained with.

    Returns:
        The language loaded into.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a module file (or one of version 1, without its base, or of a newer
            xmr), facts or shared parts that differ, or keys/shapes that differ (each named).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'language module file {path} does not exist')
    payload = read_checkpoint(path, what='language module')
    if not isinstance(payload, Mapping) or payload.get('format') != MODULE_FORMAT:
        raise ValueError(f'{path} is not an xmr language module file (format {MODULE_FORMAT!r})')
    version = payload.get('version')
    # A newer file may name its facts and base otherwise: its version decides before them.
    if isinstance(version, int) and version > MODULE_VERSION:
        raise ValueError(f'{path}: a language module of format version {version}, '
                         f'{written_by(payload)}, which reads version {MODULE_VERSION}: load it '
                         'with the xmr that wrote it, or update this one')
    target = normalize_language(lang or payload['lang'], f'{path} language')
    _check_has_language(model, path, payload['lang'], target)
    parts = _language_parts(model, target)
    if version == 2:
        if set(parts) != {'adapters'}:
            raise ValueError(f"{path} ({payload['lang']}): a language module of format version 2, "
                             "which holds no language's own disentangler, the model's "
                             f'{type(parts["disentangler"]).__name__} of {target} among them: '
                             'export it again from its training checkpoint '
                             '(tools/language_modules.py export)')
        payload = dict(payload, state_dict={f'adapters.{key}': value for key, value
                                            in payload['state_dict'].items()})
    mine = _facts(model)
    # The facts the file records: one written before target_vocabulary was a fact has none.
    differing = {k: (payload['facts'][k], v) for k, v in mine.items()
                 if k in payload['facts'] and payload['facts'][k] != v}
    if differing:
        details = '; '.join(f'{k}: file {a!r} vs model {b!r}' for k, (a, b) in differing.items())
        raise ValueError(f'{path} ({payload["lang"]}) does not fit this model: {details}')
    _check_base(model, path, payload)
    expected = language_state_dict(model, target)
    state = payload['state_dict']
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    reshaped = sorted(k for k in set(state) & set(expected) if state[k].shape != expected[k].shape)
    if missing or unexpected or reshaped:
        raise ValueError(f'{path} ({payload["lang"]}) does not fit the {target} module: missing '
                         f'{missing[:5]}, unexpected {unexpected[:5]}, other shapes '
                         f'{reshaped[:5]}; was it trained with the same adapter config? (The '
                         f'file was {written_by(payload)})')
    bad = nonfinite_keys(state)
    if bad:
        raise ValueError(f'{path} ({payload["lang"]}): {len(bad)} weights hold NaN or infinite '
                         f'values ({first_few(bad)}): the run diverged before the checkpoint it '
                         'was exported from, or the file is damaged; export the module from an '
                         'earlier checkpoint of the run')
    for part, module in parts.items():
        module.load_state_dict({key.partition('.')[2]: value for key, value in state.items()
                                if key.partition('.')[0] == part}, strict=True)
    return target


def _check_has_language(model: nn.Module, path: Path, file_lang: str, target: str) -> None:
    """Refuse a ``target`` language the model has no module of, naming the file, its language,
    the model's and both routes: the file's language is no configured one when the module is
    merged into a model of other languages (a common case: a Portuguese module for Spanish).

    Raises:
        UserKeyError: a ``KeyError``, as :meth:`LanguageAdapters.check_language
            <xmr.models.adapters.language_adapters.LanguageAdapters.check_language>` raises.
    """
    languages = list(_branch(model).adapters.sets)
    if target not in languages:
        raise UserKeyError(
            f'{path} holds the {file_lang!r} module, and the model has no {target!r} (its '
            f'languages: {languages}): load it into one of them (lang={languages[0]!r}; '
            f'tools/language_modules.py merge --modules {languages[0]}=PATH), or add '
            f'{target!r} to model.language_branch.languages')


def _check_base(model: nn.Module, path: Path, payload: Mapping[str, Any]) -> None:
    """Refuse a model whose shared parts differ from those the module was trained with."""
    base = payload.get('base')
    if payload.get('version') not in (2, MODULE_VERSION) or not isinstance(base, Mapping):
        raise ValueError(f'{path}: a language module of format version {payload.get("version")}, '
                         'which does not record the shared weights it needs: export it again '
                         'from its training checkpoint (tools/language_modules.py export)')
    mine = shared_fingerprints(model)
    differing = sorted(part for part in set(mine) | set(base['shared'])
                       if mine.get(part) != base['shared'].get(part))
    if differing:
        source = base.get('checkpoint')
        fix = (f'build the model from {source} (tools/language_modules.py merge --base {source})'
               if source else 'build the model from the checkpoint the module came from')
        raise ValueError(
            f'{path} ({payload["lang"]}): this model\'s shared weights {differing} differ from '
            f'those the module was trained with, so it would not reproduce its outputs: {fix}')


@dataclass(frozen=True)
class LanguageShare:
    """The parameters one language adds (PECTVLM's Table 5 column; DASD's #TP per language).

    Attributes:
        parameters: parameter count of the language's module, and of its own disentangler when
            the model builds one per language (DASD's paper configs).
        of_text_encoder: ``parameters / text tower parameters`` (the frozen text encoder, as
            PECTVLM reports it).
        of_backbone: ``parameters / all frozen backbone parameters`` (text and image towers).
    """

    parameters: int
    of_text_encoder: float
    of_backbone: float


def language_parameter_report(model: nn.Module) -> dict[str, LanguageShare]:
    """``{lang: LanguageShare}`` for every language of the model's branch."""
    model = unwrap_model(model)
    branch = _branch(model)
    text = sum(p.numel() for p in branch.tower.parameters())
    backbone = getattr(model, 'backbone', None)
    total = sum(p.numel() for p in backbone.parameters()) if backbone is not None else text
    report = {}
    for lang in branch.languages:
        count = sum(p.numel() for part in _language_parts(model, lang).values()
                    for p in part.parameters())
        report[lang] = LanguageShare(count, count / text, count / total)
    return report


def shared_parameter_count(model: nn.Module) -> int:
    """Parameters the languages share outside the frozen backbone: the branch's embedding
    block and a disentangler shared by all languages (the rest of DASD's #TP)."""
    model = unwrap_model(model)
    own = {id(p) for lang in _branch(model).languages
           for part in _language_parts(model, lang).values() for p in part.parameters()}
    frozen = {id(p) for p in getattr(model, 'backbone', nn.Module()).parameters()}
    parts = [getattr(model, name, None) for name in ('language_branch', 'disentangler')]
    return sum(p.numel() for part in parts if part is not None for p in part.parameters()
               if id(p) not in own and id(p) not in frozen)


def _language_parts(model: nn.Module, lang: str) -> dict[str, nn.Module]:
    """The modules of ``lang`` alone, by part: its ``adapters``, and its ``disentangler`` when
    the model has one per language."""
    parts = {'adapters': _module(model, lang)}
    disentangler = getattr(unwrap_model(model), 'disentangler', None)
    if isinstance(disentangler, PerLanguageDisentangler):
        parts['disentangler'] = disentangler.per_language[lang]
    return parts


def _per_language_containers(model: nn.Module) -> list[nn.Module]:
    """The containers of every language's own modules: the branch's adapter sets, and a
    disentangler's copies per language."""
    disentangler = getattr(model, 'disentangler', None)
    return [_branch(model).adapters.sets,
            *([disentangler.per_language] if isinstance(disentangler, PerLanguageDisentangler)
              else [])]
