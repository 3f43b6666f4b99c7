"""Turn an MLA or DASD checkpoint (their ``clip_model.state_dict()``) into an xmr checkpoint.

Both codes keep one OpenAI-CLIP state dict (whose keys are open_clip ``CLIP``'s) with their
additions: ``multilingual_embedding`` (the mBERT table), ``multilingual_embedding_linear``
(``W_e``) and per block and language an ``acquirer`` (MLA: the static adapter ``mlp``; DASD:
``mlp_beforez`` / ``mlp_afterz`` around ``W^z``), plus DASD's SDM and generator
(:mod:`.dasd`). The model of an xmr config is built, every authors' tensor is placed at its
xmr name (:mod:`.mla`, :mod:`.dasd` give the per-method names), and the result is checked
against the model before anything is written: every parameter of the backbone, the target
branch and the disentangler must come from the file with its shape, and every key of the file
left out must be one the authors' model has outside ``r^T`` (:data:`KNOWN_UNUSED`).
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from xmr.config_files import read_config_file
from xmr.datasets.languages import LanguageCodeError, normalize_language
from xmr.engine.checkpoint import FACTS, meta_records, save_model_checkpoint
from xmr.fileio import input_written_over
from xmr.models.conversion.settings import authors_differences
from xmr.models.weight_files import nonfinite_keys, read_weights
from xmr.run_config import merge_options
from xmr.utils.listing import first_few

#: Prefixes of the xmr parameters a converted file must provide (the rest, e.g. loss
#: constants, keep the config's values).
CONVERTED_PREFIXES = ('backbone.clip.', 'language_branch.', 'disentangler.')

#: The config of each method's authors' computation, named in the fixes.
AUTHORS_CONFIGS = {'mla': 'configs/dasd/mla_clip-vit-b32_multi30k_authors.py',
                   'dasd': 'configs/dasd/dasd_clip-vit-b16_multi30k_authors.py'}

#: Keys that only DASD's code writes: a DASD file given to the MLA converter is told apart.
DASD_MARKERS = ('zi_adapter_student', '.mlp_zi.', '.mlp_beforez.')


#: An acquirer parameter of any language: ``transformer.resblocks.<i>.acquirer.<lang>.<layer>``.
ACQUIRER = r'transformer\.resblocks\.\d+\.acquirer\.[^.]+\.({layers})\.(weight|bias)'

#: Keys of the authors' models that take no part in ``r^T`` (``clip/model.py``): the
#: acquirers' never-called ``ln``, the acquirers of languages the config does not name (their
#: used layers match too: what is used is taken out first), and DASD's training-only modules,
#: its unused projections and the ``zi_adapter_student`` its ``Transformer`` builds for the
#: image tower too. Any other key unused is refused: a layout this converter does not know.
KNOWN_UNUSED = {
    'mla': (ACQUIRER.format(layers=r'mlp\.c_fc|mlp\.c_proj|ln'),),
    'dasd': (ACQUIRER.format(layers=r'mlp_beforez\.c_fc|mlp_afterz\.c_proj2|mlp_sr\.c_fc|'
                             r'mlp_sr\.c_proj|mlp_sa\.c_fc|mlp_sa\.c_proj|ln'),
             r'AdvAgent\..+', 'target_projection', 'sigma_projection',
             r'visual\.transformer\.zi_adapter_student\.c_fc1\.(weight|bias)'),
}


class ConversionError(ValueError):
    """A checkpoint that cannot become the config's model; the message names file, keys, fix."""


@dataclass
class ConversionReport:
    """What a conversion used, left out and kept from the config.

    Attributes:
        used: authors' keys placed in the xmr model.
        unused: authors' keys with no place in it (training-only or never called modules).
        kept: xmr keys outside the converted parts, kept as the config builds them.
        languages_left: the file's languages (xmr codes) with acquirers that the config does
            not name: not in the converted model (their keys are among ``unused``).
    """

    used: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    languages_left: list[str] = field(default_factory=list)


#: ``(state_dict, model) -> {xmr key: tensor}``; records the authors' keys it reads.
StateMapping = Callable[[Mapping[str, torch.Tensor], nn.Module, set], dict[str, torch.Tensor]]


def read_state_dict(path: Path, method: str) -> dict[str, torch.Tensor]:
    """The tensors of the released file as :func:`~xmr.models.weight_files.read_weights` reads
    every weight file (a ``torch.save`` of the state dict, under ``state_dict`` or ``model``,
    with ``module.`` prefixes, or ``.safetensors``; each record's CRC-32 checked, which
    ``torch.load`` does not: a damaged download would convert as other numbers).

    Raises:
        ConversionError: no such file, or one that is truncated, damaged, of another format or
            holds entries that are not tensors (named).
    """
    if not path.is_file():
        raise ConversionError(f'{path}: no such file: give the path of the released checkpoint')
    try:
        return read_weights(path, f'{method.upper()} checkpoint')
    except ValueError as error:
        raise ConversionError(str(error)) from error


def check_method(path: Path, state: Mapping[str, torch.Tensor], method: str) -> None:
    """Refuse a file of the other method (or of neither) before mapping anything."""
    dasd = [k for k in state if any(m in k for m in DASD_MARKERS)]
    acquirers = [k for k in state if '.acquirer.' in k]
    if not acquirers:
        raise ConversionError(
            f'{path}: no per-language acquirer modules (no key like transformer.resblocks.0.'
            f'acquirer.<lang>.*; {len(state)} keys, e.g. {first_few(state)}): not an MLA or DASD '
            'checkpoint; give the released model file (the CLIP weights alone go to '
            'model.backbone.pretrained, or with the acquirers\' file to --clip-checkpoint)')
    if method == 'mla' and dasd:
        raise ConversionError(f'{path}: a DASD checkpoint ({len(dasd)} DASD keys: '
                              f'{first_few(dasd)}) given to the MLA converter: use '
                              'tools/convert/dasd_to_xmr.py')
    if method == 'dasd' and not dasd:
        raise ConversionError(f'{path}: an MLA checkpoint (acquirers without DASD\'s mlp_zi / '
                              f'zi_adapter_student: {first_few(acquirers)}) given to the DASD '
                              'converter: use tools/convert/mla_to_xmr.py')


def check_settings(path: Path, model: nn.Module, method: str, config: str) -> None:
    """Refuse a config that would run the file's weights otherwise than the authors' code.

    Settings without parameters (activation, SDM depth, padding, ...) cannot be read from the
    file (:mod:`.settings` lists them); a difference would convert and compute something else.
    """
    problem = settings_problem(model, method)
    if problem is not None:
        raise ConversionError(f'{path}: the {config} model {problem}')


def settings_problem(model: nn.Module, method: str) -> str | None:
    """How ``model`` computes otherwise than ``method``'s code (``'does not compute what ...'``,
    each setting named with its value and the authors'), or ``None``."""
    found = authors_differences(model, method)
    if not found:
        return None
    details = '; '.join(f'{setting} is {value!r}, the authors\' code: {wanted!r}'
                        for setting, value, wanted in found)
    return (f'does not compute what the {method.upper()} code computes ({details}): convert '
            f'(and test) with {AUTHORS_CONFIGS[method]}, or a config that inherits its model')


def take(state: Mapping[str, torch.Tensor], used: set, key: str) -> torch.Tensor:
    """``state[key]`` as float32, recorded as used (a missing key is caught by the check)."""
    used.add(key)
    return state[key].float() if key in state else None


def clip_keys(model: nn.Module) -> set[str]:
    """The keys of the model's CLIP towers, in the authors' (OpenAI's) names."""
    return {k.removeprefix('backbone.clip.') for k in model.state_dict()
            if k.startswith('backbone.clip.')}


def with_clip_from(path: Path, state: Mapping[str, torch.Tensor], clip_path: Path,
                   model: nn.Module, config: str) -> tuple[dict[str, torch.Tensor], list[str]]:
    """``state`` with the CLIP towers of ``clip_path`` in place of its own, and the keys of
    either file left out (``'<file>:<key>'``).

    MLA's ``inference.sh CLIP_CKPT ACQ_CKPT`` builds CLIP from the first file and loads only
    the acquirers and the embedding block from the second: its fine-tuned results pair the
    English fine-tuned CLIP (``finetune-en-m30k``) with the LE or ``finetune-all`` acquirers.

    Raises:
        ConversionError: ``clip_path`` unreadable, or lacking a weight of the ``config``
            model's CLIP, holding one of another shape (named with both shapes) or NaN or
            infinite values.
    """
    try:
        clip_state = read_weights(clip_path, 'CLIP checkpoint')
    except (ValueError, FileNotFoundError) as error:
        raise ConversionError(f'{error}; give the CLIP file the acquirers were evaluated '
                              'with (their --clip_ckpt)') from error
    wanted = clip_keys(model)
    absent = sorted(wanted - set(clip_state))
    if absent:
        raise ConversionError(
            f'{clip_path}: {len(absent)} weights of the config\'s CLIP are not in the CLIP '
            f'file ({first_few(absent)}): give the file of CLIP (their --clip_ckpt, e.g. '
            'finetune-en-m30k/pytorch_model.bin.4), or a config of its architecture')
    towers = clip_weights(clip_state, model, set())
    check_shapes(clip_path, towers, model, config)
    check_finite(clip_path, towers)  # here, where the file holding them can be named
    merged = {k: v for k, v in state.items() if k not in wanted}
    merged.update({k: clip_state[k] for k in wanted})
    left = ([f'{path}:{k}' for k in sorted(wanted & set(state))] +
            [f'{clip_path}:{k}' for k in sorted(set(clip_state) - wanted)])
    return merged, left


def clip_weights(state: Mapping[str, torch.Tensor], model: nn.Module,
                 used: set) -> dict[str, torch.Tensor]:
    """CLIP's weights of ``state`` under their xmr names (open_clip keys under
    ``backbone.clip.``)."""
    mapped = {f'backbone.clip.{k}': take(state, used, k) for k in clip_keys(model)
              if k in state}
    scale, model_scale = mapped.get('backbone.clip.logit_scale'), model.backbone.clip.logit_scale
    if scale is not None and scale.numel() == 1:  # a scalar in some saves, [1] in others
        mapped['backbone.clip.logit_scale'] = scale.reshape(model_scale.shape)
    return mapped


def clip_and_embedding(state: Mapping[str, torch.Tensor], model: nn.Module,
                       used: set) -> dict[str, torch.Tensor]:
    """CLIP's weights (:func:`clip_weights`) and the embedding block."""
    mapped = clip_weights(state, model, used)
    for name, key in (('table.weight', 'multilingual_embedding.weight'),
                      ('proj.weight', 'multilingual_embedding_linear.weight'),
                      ('proj.bias', 'multilingual_embedding_linear.bias')):
        mapped[f'language_branch.embedding.{name}'] = take(state, used, key)
    return mapped


def check_unused(path: Path, state: Mapping[str, torch.Tensor], used: set,
                 method: str) -> list[str]:
    """The file's keys left out of the model, refused unless :data:`KNOWN_UNUSED` names them."""
    unused = sorted(set(state) - used)
    unknown = [k for k in unused if not any(re.fullmatch(p, k) for p in KNOWN_UNUSED[method])]
    if unknown:
        raise ConversionError(
            f'{path}: {len(unknown)} keys that the {method.upper()} code\'s model does not have '
            f'({first_few(unknown)}): the file holds modules this converter does not know, whose '
            'part in the computation it cannot place; convert the checkpoint its train.py '
            'wrote, without keys added to it (an optimizer state, another model\'s weights)')
    return unused


def adapter_key(lang: str, block: int, name: str) -> str:
    """xmr name of a block-output adapter parameter of ``lang`` (``down.weight``, ...)."""
    return f'language_branch.adapters.sets.{lang}.{block}:block_output.{name}'


#: Layers of an acquirer: a file whose ``acquirer.<x>`` is one of them has no language level.
ACQUIRER_LAYERS = ('mlp', 'ln', 'mlp_sr', 'mlp_sa', 'mlp_beforez', 'mlp_afterz')


def file_languages(path: Path, state: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """``{canonical code: the file's code}`` of the acquirers' languages (``jp`` -> ``ja``).

    Raises:
        ConversionError: acquirers without a language level (trained without
            ``--m_acquirer``), or two codes of the file for one language.
    """
    codes = sorted({k.split('.acquirer.')[1].split('.')[0] for k in state if '.acquirer.' in k})
    layers = [c for c in codes if c in ACQUIRER_LAYERS]
    if layers:
        raise ConversionError(
            f'{path}: acquirers without a language (transformer.resblocks.0.acquirer.'
            f'{layers[0]}.*): a model trained without --m_acquirer, one acquirer for every '
            'language; the converters read per-language acquirers (acquirer.<lang>.*, the '
            'released models\' layout): rename each acquirer.<layer> key to '
            'acquirer.<lang>.<layer> for the language it serves')
    canonical: dict[str, str] = {}
    for code in codes:
        try:
            name = normalize_language(code, f'{path}: acquirer language')
        except LanguageCodeError:
            name = code  # left as it is: named among the file's languages if the config asks
        if name in canonical:
            raise ConversionError(f'{path}: acquirers under {canonical[name]!r} and {code!r}, '
                                  f'two codes of {name!r}: keep the one its model was trained '
                                  'with and remove the other\'s keys')
        canonical[name] = code
    return canonical


def check_languages(path: Path, codes: Mapping[str, str], languages: list[str]) -> None:
    """Every language the config names has acquirers in the file (``codes``:
    :func:`file_languages`)."""
    absent = [lang for lang in languages if lang not in codes]
    if absent:
        keys = [f'transformer.resblocks.0.acquirer.{lang}' for lang in absent]
        present = sorted(codes)
        raise ConversionError(
            f'{path}: no acquirer modules for {", ".join(absent)} (missing '
            f'{first_few(keys)}.*; the '
            f'config names {", ".join(languages)}, the file has {", ".join(present) or "none"}): '
            'convert with the languages of the file, e.g. --cfg-options '
            f'model.language_branch.languages="{present}"')


def canonical_acquirers(state: Mapping[str, torch.Tensor], codes: Mapping[str, str]
                        ) -> dict[str, torch.Tensor]:
    """``state`` with each acquirer key under its canonical code (``...acquirer.jp.mlp...``
    -> ``...acquirer.ja.mlp...``)."""
    renamed = {}
    for name, code in codes.items():
        if name != code:
            renamed.update({k.replace(f'.acquirer.{code}.', f'.acquirer.{name}.'): k
                            for k in state if f'.acquirer.{code}.' in k})
    original = set(renamed.values())
    return {**{k: v for k, v in state.items() if k not in original},
            **{new: state[old] for new, old in renamed.items()}}


def file_key(key: str, codes: Mapping[str, str]) -> str:
    """``key`` as the file names it: an acquirer's under the file's code of its language
    (:func:`canonical_acquirers` reversed), also for a key the file lacks."""
    for name, code in codes.items():
        if f'.acquirer.{name}.' in key:
            return key.replace(f'.acquirer.{name}.', f'.acquirer.{code}.')
    return key


def check_against_model(path: Path, mapped: dict[str, torch.Tensor], model: nn.Module,
                        config: str, absent: list[str]) -> list[str]:
    """Refuse missing or differently shaped parameters; return the xmr weights kept as built
    (the model's facts, ``_extra_state``, are recorded as built and not counted).

    ``absent``: the authors' keys the mappings looked for in vain, named in the refusal.
    """
    expected = {k: v for k, v in model.state_dict().items()}
    aliases = _aliases(model)
    missing = sorted(k for k in expected if k.startswith(CONVERTED_PREFIXES)
                     and k not in mapped and k not in aliases)
    if absent or missing:
        raise ConversionError(
            f'{path}: {len(absent) + len(missing)} parameters of the {config} model are '
            f'not in the file ({first_few(absent + missing)}): it is a checkpoint of another '
            'architecture or setting; convert with the config it was trained as')
    placeless = sorted(set(mapped) - set(expected))
    if placeless:
        raise ConversionError(f'{path}: the {config} model has no {first_few(placeless)}: convert '
                              'with a config of the authors\' model (configs/dasd/*_authors.py)')
    check_shapes(path, mapped, model, config)
    # The retriever's facts (backbone, width, languages) are recorded, not a weight kept.
    return sorted(k for k in expected if not k.startswith(CONVERTED_PREFIXES) and
                  k not in aliases and not k.endswith(FACTS))


def check_shapes(path: Path, mapped: Mapping[str, torch.Tensor], model: nn.Module,
                 config: str) -> None:
    """Refuse weights of ``path`` (``mapped``, xmr names the model has) whose shape is not the
    ``config`` model's, naming the first three with both shapes and each part's cause and fix
    (:func:`shape_fixes`)."""
    expected = model.state_dict()
    reshaped = sorted(k for k in mapped if tuple(mapped[k].shape) != tuple(expected[k].shape))
    if reshaped:
        details = '; '.join(f'{k}: file {tuple(mapped[k].shape)} vs config '
                            f'{tuple(expected[k].shape)}' for k in reshaped[:3])
        fixes = '; '.join(dict.fromkeys(
            fix for k in reshaped
            for fix in shape_fixes(k, tuple(mapped[k].shape), tuple(expected[k].shape))))
        raise ConversionError(
            f'{path}: {len(reshaped)} parameters differ in shape from the {config} model '
            f'({details}{"; ..." if len(reshaped) > 3 else ""}): {fixes}')


#: What a parameter of another shape says, by the part of the model it is in, and the fix.
SHAPE_FIXES = (
    ('language_branch.embedding.table.', "the config's target tokenizer has another vocabulary "
     'than the file\'s table (the authors\' is mBERT cased, 119,547 ids): set '
     'model.language_branch.tokenizer.name_or_path to bert-base-multilingual-cased (or its '
     'local folder)'),
    ('language_branch.adapters.', "the config's acquirers have another width than the file's "
     '(MLA: hidden 256, DASD: 32): set model.language_branch.adapters.hidden to the file\'s'),
    ('disentangler.', "the config's SDM or generator has other widths than the file's (DASD: "
     'd_z 512, d_u 32): set model.disentangler.generator.d_z / d_u to the file\'s'),
    ('', 'the file is a checkpoint of another architecture (e.g. ViT-B/16 vs ViT-B/32: '
     'visual.conv1.weight); use a config of its architecture (model.backbone.arch, with '
     'QuickGELU: e.g. ViT-B-16-quickgelu)'),
)


#: The embedding block's weights whose columns are the table's width (``[V, W]``, ``[D, W]``).
TABLE_WIDTH_KEYS = ('language_branch.embedding.table.weight',
                    'language_branch.embedding.proj.weight')

#: What another table width says (columns of :data:`TABLE_WIDTH_KEYS`), and the fix.
TABLE_WIDTH_FIX = ("the config's embedding table has another width than the file's (the "
                   "authors' is mBERT's, 768): set model.language_branch.embedding.table_width "
                   "to the file's")


def shape_fixes(key: str, file_shape: tuple, config_shape: tuple) -> list[str]:
    """The causes and fixes of ``key`` (an xmr name) being ``file_shape`` in the file and
    ``config_shape`` in the model: by the part of the model it is in (:data:`SHAPE_FIXES`),
    and the table's width where the columns of the table or ``W_e`` differ, which is neither
    the vocabulary nor the architecture."""
    fixes = []
    if key in TABLE_WIDTH_KEYS and file_shape[1:] != config_shape[1:]:
        fixes.append(TABLE_WIDTH_FIX)
    if not fixes or file_shape[:1] != config_shape[:1]:
        fixes.append(next(fix for prefix, fix in SHAPE_FIXES if key.startswith(prefix)))
    return fixes


def check_finite(path: Path, mapped: Mapping[str, torch.Tensor]) -> None:
    """Refuse NaN or infinite values in the weights placed (a run diverged before it saved,
    or a file damaged where no CRC-32 guards it): every score would come out NaN."""
    bad = nonfinite_keys(mapped)
    if bad:
        raise ConversionError(f'{path}: {len(bad)} weights hold NaN or infinite values '
                              f'({first_few(bad)}): the run diverged or the file is damaged; '
                              'convert another checkpoint of the run, or download it again')


def _aliases(model: nn.Module) -> set[str]:
    """State-dict names of tensors also reachable under another (first) name."""
    seen, aliases = {}, set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            aliases.add(name)
        seen.setdefault(id(tensor), name)
    return aliases


def build_model(config: str | os.PathLike, cfg_options: Mapping | None = None) -> nn.Module:
    """The config's model, without fetching pretrained weights (the checkpoint brings them).

    Raises:
        ConversionError: a model the config cannot build, naming the config and the reason.
    """
    from xmr.registry import MODELS

    cfg = read_config_file(config, import_custom_modules=True)
    merge_options(cfg, cfg_options or {})
    branch = cfg.model.get('language_branch') or {}
    for part in (cfg.model.get('backbone'), branch.get('embedding')):
        if part is not None and 'pretrained' in part:  # a part without it is refused later
            part.pretrained = None
    try:
        return MODELS.build(cfg.model)
    except (ValueError, KeyError, TypeError) as error:
        reason = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise ConversionError(f'{config}: its model cannot be built: {reason}') from error


def state_for(path: Path, state: Mapping[str, torch.Tensor], codes: Mapping[str, str],
              model: nn.Module, clip_source: str | os.PathLike | None, config: str
              ) -> tuple[dict[str, torch.Tensor], list[str]]:
    """``state`` as the mappings read it: the acquirers under xmr's codes (``codes``:
    :func:`file_languages`; :func:`canonical_acquirers`), CLIP from ``clip_source`` when given
    (:func:`with_clip_from`); with the keys CLIP's file replaced."""
    state = canonical_acquirers(state, codes)
    if clip_source is None:
        return state, []
    return with_clip_from(path, state, Path(clip_source), model, config)


def check_out(out: str | os.PathLike, inputs: tuple, method: str, overwrite: bool) -> None:
    """Refuse, before any work, an ``out`` that writing would lose or cannot take: an input
    of the conversion (the release, the CLIP file, the config), a folder, or a file standing
    there that is no earlier conversion (a training checkpoint, a test result), or is one and
    ``overwrite`` is not given.

    Raises:
        ConversionError: naming ``out`` and the fix.
    """
    if input_written_over(out, inputs) is not None:
        raise ConversionError(f'{out}: the output (--out) is a file the conversion reads: '
                              'write the xmr checkpoint to another file')
    out = Path(out)
    if out.is_dir():
        raise ConversionError(f'{out} (--out): a folder: give the file to write in it, e.g. '
                              f'--out {out / f"{method}_converted.pth"}')
    if not out.exists():
        return
    if not overwrite:
        raise ConversionError(f'{out} (--out): exists and is kept: pass --overwrite '
                              '(overwrite=True) to replace an earlier conversion, or give --out '
                              'another file')
    if not meta_records(out, 'converted_from'):
        raise ConversionError(f'{out} (--out): exists and is no earlier conversion (its meta '
                              'records no converted_from); it is left as it is: give --out '
                              'another file')


def convert_authors_checkpoint(method: str, source: str | os.PathLike, config: str | os.PathLike,
                               out: str | os.PathLike, mapping: StateMapping,
                               cfg_options: Mapping | None = None,
                               clip_source: str | os.PathLike | None = None,
                               overwrite: bool = False) -> ConversionReport:
    """Convert ``source`` into the model of ``config`` and write ``out`` (atomically).

    Args:
        method: ``'mla'`` or ``'dasd'``: the file must be of that method.
        source: the authors' checkpoint.
        config: the xmr config whose model the file becomes.
        out: the xmr checkpoint written (``{'state_dict', 'meta'}``), only when all is well.
        mapping: the method's ``(state, model, used) -> {xmr key: tensor}``.
        cfg_options: overrides merged into the config.
        clip_source: a file whose CLIP towers replace ``source``'s (:func:`with_clip_from`);
            its keys and ``source``'s CLIP keys are reported unused as ``'<file>:<key>'``.
        overwrite: replace a file at ``out`` that is an earlier conversion (its ``meta``
            records ``converted_from``); any other file there is always kept (:func:`check_out`).

    Raises:
        ConversionError: naming the file, the keys at fault (first few and counts) and the fix.
    """
    path = Path(source)
    check_out(out, (source, clip_source, config), method, overwrite)
    state = read_state_dict(path, method)
    check_method(path, state, method)
    model = build_model(config, cfg_options)
    check_settings(path, model, method, Path(config).name)
    codes = file_languages(path, state)
    check_languages(path, codes, list(model.languages))
    state, replaced = state_for(path, state, codes, model, clip_source, Path(config).name)
    used: set[str] = set()
    mapped = {**clip_and_embedding(state, model, used), **mapping(state, model, used)}
    kept = check_against_model(path, mapped, model, Path(config).name,
                               sorted(file_key(k, codes) for k in used if k not in state))
    check_finite(path, mapped)
    unused = check_unused(path, state, used, method)
    model.load_state_dict(mapped, strict=False)
    report = ConversionReport(used=sorted(file_key(k, codes) for k in used),
                              unused=sorted(file_key(k, codes) for k in unused) + replaced,
                              kept=kept,
                              languages_left=sorted(set(codes) - set(model.languages)))
    meta = dict(converted_from=str(path), clip_from=clip_source and str(clip_source),
                method=method, config=str(config),
                used_keys=len(report.used), unused_keys=report.unused, kept_keys=report.kept)
    save_model_checkpoint(out, model.state_dict(), meta)
    return report
