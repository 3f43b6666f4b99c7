"""Loading MMEngine checkpoints on torch >= 2.6, where ``torch.load`` defaults to weights only.

MMEngine 0.10.7 calls ``torch.load`` without ``weights_only``, so torch >= 2.6 unpickles every
checkpoint with its weights-only unpickler. Besides tensors, an xmr checkpoint holds numpy
arrays and scalars (RNG states, metric values) and, once
:class:`~xmr.engine.hooks.WeightsOnlyCheckpointHook` has flattened them, no other objects.
xmr allow-lists exactly those numpy types instead of turning the safety check off.
:func:`state_dict_mismatches` says how a checkpoint's weights differ from a model's, for the
strict resume of :class:`~xmr.engine.hooks.CheckpointHook`.

:func:`save_model_checkpoint` writes a checkpoint outside training (a converted or merged
model) as training does, its ``meta`` recording the xmr that wrote it (:func:`~xmr.version.
provenance`), which the errors of a failed load name (:func:`~xmr.version.written_by`).

:func:`read_checkpoint` is the one reader of checkpoint files: a truncated, empty or foreign file
is an error naming it, and only a file that pickles MMEngine's own objects is diagnosed as a
checkpoint written before xmr stored its logs as plain data.
"""
from __future__ import annotations

import importlib
import os
import pickle
import pickletools
import re
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from xmr.fileio import atomic_torch_save
from xmr.models.torchscript_weights import is_torchscript_archive
from xmr.utils.cli import given_file
from xmr.utils.listing import first_few
from xmr.version import provenance

_REGISTERED = False
#: A retriever's state-dict entry of its facts (backbone, width, languages: its extra state),
#: no weight: every reader of a checkpoint compares them by value
#: (:func:`~xmr.models.retrievers.checkpoint_facts.check_checkpoint_facts`).
FACTS = '_extra_state'


#: Where numpy keeps the functions its pickles name: numpy 2 renamed ``numpy.core`` to
#: ``numpy._core``, and a pickle names the module of the numpy that wrote it.
_NUMPY_MULTIARRAY = ('numpy._core.multiarray', 'numpy.core.multiarray')


def _numpy_multiarray():
    """``numpy._core.multiarray`` (numpy 2) or ``numpy.core.multiarray`` (numpy 1)."""
    for name in _NUMPY_MULTIARRAY:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError('numpy has neither _core.multiarray nor core.multiarray')


def allow_mmengine_checkpoint_types() -> None:
    """Add the numpy types xmr checkpoints contain to torch's weights-only allow-list.

    A checkpoint names numpy's reconstructors by the module of the numpy that wrote it: both
    names are allowed, so that a run trained under numpy 1 (a GPU image's) is tested, resumed
    or served under numpy 2, and the other way round.

    Idempotent; call it before ``Runner.resume`` / ``load_checkpoint`` (``tools/train.py`` and
    ``tools/test.py`` do).
    """
    global _REGISTERED
    if _REGISTERED:
        return
    multiarray = _numpy_multiarray()
    dtype_classes = [type(np.dtype(kind)) for kind in (
        'float16', 'float32', 'float64', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint32',
        'uint64', 'bool')]
    reconstructors = [(getattr(multiarray, function), f'{module}.{function}')
                      for module in _NUMPY_MULTIARRAY for function in ('_reconstruct', 'scalar')]
    torch.serialization.add_safe_globals([np.ndarray, np.dtype, *reconstructors,
                                          *dtype_classes])
    _REGISTERED = True


def state_dict_mismatches(expected: Mapping[str, torch.Tensor],
                          loaded: Mapping[str, torch.Tensor], shown: int = 3) -> list[str]:
    """How ``loaded`` differs from ``expected``: missing, unexpected and differently shaped keys.

    Args:
        expected: the model's state dict.
        loaded: the checkpoint's state dict (``module.`` prefixes already stripped).
        shown: keys listed per kind; the count is always complete.

    Returns:
        One line per kind of difference, e.g. ``2 keys of other shapes: a.weight (checkpoint
        [4, 8], model [4, 16]), ...``; empty when the two match.
    """
    def line(kind: str, items: list[str]) -> list[str]:
        return [f'{len(items)} {kind}: {first_few(items, shown)}'] if items else []

    # The facts' length is their JSON's: check_checkpoint_facts compares them, not a shape.
    shapes = [f'{key} (checkpoint {list(loaded[key].shape)}, model {list(value.shape)})'
              for key, value in expected.items()
              if key != FACTS and key in loaded and hasattr(loaded[key], 'shape')
              and tuple(loaded[key].shape) != tuple(value.shape)]
    return (line('keys of other shapes', shapes)
            + line('keys missing from the checkpoint',
                   [key for key in expected if key not in loaded])
            + line('keys the model does not have', [key for key in loaded if key not in expected]))


def save_model_checkpoint(path: str | os.PathLike, state_dict: Mapping[str, torch.Tensor],
                          meta: Mapping[str, Any]) -> Path:
    """Write ``{'state_dict', 'meta'}``, as ``tools/test.py`` loads it, through a temporary file;
    ``meta`` gains the :func:`~xmr.version.provenance` of the running xmr, as the checkpoints
    of training do (:class:`~xmr.engine.hooks.CheckpointHook`).

    Returns:
        The path written.
    """
    return atomic_torch_save(dict(state_dict=dict(state_dict), meta={**meta, **provenance()}),
                             path)


class CheckpointReadError(ValueError):
    """A file that cannot be read as a checkpoint (truncated, empty, foreign or unsafe)."""


#: What a torch zip archive and a pickle start with.
_ZIP_MAGIC, _PICKLE_MAGIC = b'PK\x03\x04', b'\x80'
#: Bytes read at a time when checking a record's CRC-32.
_CHUNK = 1 << 24
#: Globals of MMEngine checkpoints written before ``WeightsOnlyCheckpointHook`` existed.
_MMENGINE_GLOBALS = ('mmengine.', 'builtins.getattr')


def keys_of_another_model(state: Mapping[str, Any], model_keys: Iterable[str]) -> str | None:
    """``its keys: ...; the model's: ...`` (three of each) when the state dict ``state``
    (``module.`` prefixes aside) holds none of the weights among ``model_keys`` (the model's
    facts, :data:`FACTS`, are none): another model's file, a raw open_clip or Hugging Face one,
    weights under another key, the facts alone; ``None`` when it holds one."""
    loaded = [re.sub(r'^module\.', '', str(key)) for key in state]
    weights = [key for key in model_keys if key != FACTS]
    if set(loaded) & set(weights):
        return None
    return f"its keys: {', '.join(loaded[:3]) or 'none'}; the model's: {', '.join(weights[:3])}"


def foreign_checkpoint_fix(path: str | os.PathLike, state: Mapping[str, Any],
                           model_keys: Iterable[str]) -> str:
    """What to do with the checkpoint ``path`` whose ``state`` holds none of the model's weights
    (:func:`keys_of_another_model`): a backbone's pretrained weights alone under its own names
    (open_clip's ``epoch_N.pt`` or ``open_clip_pytorch_model.bin`` for ``backbone.clip``) go to
    the backbone's config, any other file through training or ``tools/convert/``."""
    part = _part_holding(state, model_keys)
    if part is not None and part.startswith('backbone.'):
        return (f"it holds the weights of the model's {part} alone (a pretrained checkpoint of "
                "the backbone, such as open_clip's training writes, epoch_N.pt), not of the "
                f'whole model: give it to the backbone, model.backbone.pretrained={path} with '
                'model.backbone.pretrained_cfg (--cfg-options; docs/pretrained_weights.md)')
    return ("give a checkpoint tools/train.py wrote for this config's model (a released one "
            'through tools/convert/)')


def _part_holding(state: Mapping[str, Any], model_keys: Iterable[str]) -> str | None:
    """The module (``'backbone.clip'``) whose weights are exactly the keys of ``state``
    (``module.`` prefixes aside) under the module's own names, or ``None``."""
    loaded = {re.sub(r'^module\.', '', str(key)) for key in state}
    weights = set(model_keys)
    if not loaded:
        return None
    some = next(iter(loaded))
    prefixes = {key[:-len(some)] for key in weights if key.endswith(f'.{some}')}
    held = [prefix for prefix in prefixes
            if {key[len(prefix):] for key in weights if key.startswith(prefix)} == loaded]
    return held[0].rstrip('.') if held else None


#: What to give in place of a file that is no torch file at all.
TORCH_FILE_FIX = 'give a .pth written by torch.save (tools/train.py writes them)'


def read_checkpoint(path: str | os.PathLike, what: str = 'checkpoint',
                    fix: str = TORCH_FILE_FIX, mmap: bool = False) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU, with every failure naming the file.

    Args:
        path: the file.
        what: what the file should be, for the messages (``'checkpoint'``, ``'language
            module'``).
        fix: what to give instead of a file that is no torch file.
        mmap: map the tensors of a zip archive from the file rather than read them into memory
            (pages are read as they are used; its records' CRC-32 are still checked first).

    Raises:
        FileNotFoundError: no such file, or a folder.
        CheckpointReadError: an empty, truncated or foreign file, a TorchScript model archive
            (a backbone's released weights, sent to the backbone's setting), or one that
            pickles objects a weights-only load refuses (advice to re-save only for MMEngine's
            own objects).
    """
    check_checkpoint(path, what, fix)
    refuse_torchscript(path, what, fix)
    allow_mmengine_checkpoint_types()
    try:
        return torch.load(path, map_location='cpu', weights_only=True,
                          mmap=mmap and zipfile.is_zipfile(path))
    except pickle.UnpicklingError as error:
        refused = refused_global(error)
        raise CheckpointReadError(_refused_message(Path(path), what,
                                                   [refused] if refused else [])) from error
    except (RuntimeError, EOFError, KeyError, ValueError, OSError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise _corrupt(path, what, reason) from error


def refused_global(error: Exception) -> str | None:
    """The global a weights-only ``torch.load`` refused (``argparse.Namespace``), as its
    ``error`` names it; ``None`` where it names none."""
    found = re.search(r'Unsupported global: GLOBAL (\S+)', str(error))
    return found.group(1) if found else None


#: What a user who gave a backbone's TorchScript archive as a checkpoint should do instead.
_TORCHSCRIPT_FIX = ("give it to the backbone: model.backbone.pretrained={path} with "
                   "model.backbone.pretrained_cfg=openai for OpenAI's files (MultilingualCLIP"
                   "Backbone's image tower: image_pretrained, image_pretrained_cfg; --cfg-options; "
                   'docs/pretrained_weights.md)')


def refuse_torchscript(path: str | os.PathLike, what: str = 'checkpoint',
                       fix: str = TORCH_FILE_FIX) -> None:
    """Refuse a TorchScript model archive given where an xmr ``what`` goes: OpenAI's
    ``ViT-B-32.pt`` holds a backbone's pretrained weights, and ``torch.load`` refuses it with
    advice to trust the file (``weights_only=False``) that would not help, as if it were
    damaged.

    Raises:
        CheckpointReadError: naming the file, what it is, the backbone setting that takes it
            (:data:`_TORCHSCRIPT_FIX`) and ``fix``.
    """
    if not zipfile.is_zipfile(path):
        return
    with zipfile.ZipFile(path) as archive:
        if not is_torchscript_archive(archive.namelist()):
            return
    raise CheckpointReadError(
        f'{path}: not an xmr {what} but a TorchScript model archive (the format of OpenAI\'s '
        'released CLIP weights, ViT-B-32.pt), which holds the pretrained weights of a backbone, '
        f'not a model xmr trained; {_TORCHSCRIPT_FIX.format(path=path)}; as the {what}, {fix}')


def check_checkpoint(path: str | os.PathLike, what: str = 'checkpoint',
                     fix: str = TORCH_FILE_FIX) -> None:
    """Fail as :func:`read_checkpoint` does on a missing, empty, foreign or truncated file,
    without loading it (``tools/train.py`` checks ``--resume`` so before the runner writes).

    A torch zip archive must hold its central directory, which lies at the end: a truncated
    copy or an interrupted save has none. Each of its records must match the CRC-32 that
    ``torch.save`` wrote for it: ``torch.load`` checks none, so a damaged tensor would load as
    other numbers. Its pickle may name no object a weights-only load refuses (MMEngine's resume
    would fail on it with torch's advice to trust the file). A legacy file (``torch.save``'s
    format before torch 1.6) has no CRC-32: its pickles must be whole, and a cut in its tensors'
    bytes is found when they are read.

    Raises:
        FileNotFoundError: no such file, or a folder.
        CheckpointReadError: an empty, foreign, truncated or damaged file, or one pickling an
            object a weights-only load refuses.
    """
    path = Path(path)
    if path.is_dir():  # FileNotFoundError still: every caller's handler of a missing file takes it
        raise FileNotFoundError(f'{what} is a folder, not a file: {path}; {fix}')
    if not path.is_file():
        raise FileNotFoundError(f'{what} not found: {path}')
    head = torch_save_head(path)
    if head is None:
        found = 'an empty file' if not path.stat().st_size else \
            'neither a torch zip archive nor a pickle'
        raise CheckpointReadError(f'{path}: not a {what}: {found}; {fix}')
    if head == _ZIP_MAGIC:
        check_archive_records(path, what)
        _check_pickled_globals(path, what, fix)
    else:
        _check_legacy_pickles(path, what)


def torch_save_head(path: str | os.PathLike) -> bytes | None:
    """How the file ``path`` begins if as a ``torch.save`` file does (a zip archive's magic, or
    a pickle's first byte), else ``None``."""
    with open(path, 'rb') as handle:
        head = handle.read(len(_ZIP_MAGIC))
    return head if head.startswith((_ZIP_MAGIC, _PICKLE_MAGIC)) else None


def _check_pickled_globals(path: Path, what: str, fix: str) -> None:
    """Refuse a ``torch.save`` archive whose pickle names an object a weights-only load
    refuses, reading the names alone (no tensor), and a zip archive torch wrote none of; a
    TorchScript archive (OpenAI's CLIP releases) is left to its own loader."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    if is_torchscript_archive(names):
        return
    if not any(name.endswith('/data.pkl') or name == 'data.pkl' for name in names):
        raise CheckpointReadError(f'{path}: not a {what}: a zip archive torch.save did not write '
                                  f'(it holds no data.pkl); {fix}')
    allow_mmengine_checkpoint_types()
    try:
        refused = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except (RuntimeError, ValueError, pickle.UnpicklingError, EOFError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise _corrupt(path, what, reason) from error
    if refused:
        raise CheckpointReadError(_refused_message(path, what, refused))


#: The pickles a legacy ``torch.save`` file begins with: its magic number, protocol version,
#: system facts, the object saved and its storages' keys (the storages' bytes follow).
_LEGACY_PICKLES = 5


def _check_legacy_pickles(path: Path, what: str) -> None:
    """Refuse a legacy ``torch.save`` file whose pickles are cut off or hold an unknown opcode,
    reading their opcodes alone: a weights-only load of a file cut inside a global's name
    refused the name's start (``coll.``) as a foreign object, or failed with ``IndexError``."""
    with open(path, 'rb') as handle:
        try:
            for _ in range(_LEGACY_PICKLES):
                for _ in pickletools.genops(handle):
                    pass
        # genops' error for a cut or unknown opcode; a damaged length it cannot even allocate.
        except (ValueError, MemoryError) as error:
            raise _corrupt(path, what, f'its pickles are cut off or damaged: {error}') from error


#: What to give in place of a checkpoint refused by :func:`check_given_checkpoint`.
CHECKPOINT_FIX = ('give a .pth written by tools/train.py (a relative path from the folder you '
                  'run in)')


def check_given_checkpoint(path: str | os.PathLike, key: str, fix: str = CHECKPOINT_FIX) -> None:
    """A checkpoint the user named, checked before the run writes or builds anything: every
    tool and :func:`~xmr.apis.init_retriever` refuse one the same way.

    Args:
        path: the checkpoint as given.
        key: the flag, config key or argument it came from (``'--resume'``, ``'load_from'``).
        fix: what to give instead, where the tool offers more than :data:`CHECKPOINT_FIX`.

    Raises:
        UserError: missing, a folder or unreadable, naming the path and ``key``
            (:func:`~xmr.utils.cli.given_file`).
        CheckpointReadError: an empty, foreign, truncated or damaged file
            (:func:`check_checkpoint`), or a backbone's TorchScript archive
            (:func:`refuse_torchscript`).
    """
    given_file(path, key, fix)
    check_checkpoint(path)
    refuse_torchscript(path, f'checkpoint ({key})', fix)


#: What ``meta`` of a checkpoint to resume from holds: MMEngine's resume reads both.
_RESUMED_META = ('epoch', 'iter')


def refuse_unresumable(checkpoint: Any, path: str | os.PathLike) -> None:
    """Refuse, as a checkpoint to resume from, a file that keeps weights alone: a
    ``phase_best/`` file, a model converted or merged by ``tools/``
    (:func:`save_model_checkpoint`), a bare state dict. MMEngine's resume met them with
    ``KeyError: 'meta'`` or ``'message_hub'`` once the run was built, and the strict resume
    called every weight of a bare state dict missing.

    Args:
        checkpoint: the loaded file.
        path: the file, for the message.

    Raises:
        CheckpointReadError: naming the file, the entries it lacks, and ``load_from``, which
            starts a new run from its weights.
    """
    meta = checkpoint.get('meta') if isinstance(checkpoint, Mapping) else None
    lacks = ([key for key in ('state_dict', 'message_hub')
              if not isinstance(checkpoint, Mapping) or key not in checkpoint]
             + [f'meta.{key}' for key in _RESUMED_META
                if not isinstance(meta, Mapping) or key not in meta])
    if lacks:
        raise CheckpointReadError(
            f'{path}: not a checkpoint to resume from: it has no {", ".join(lacks)}, which a '
            'checkpoint of training holds (its iteration, logs and optimiser state); it keeps '
            'weights alone (a phase_best/ file, a model that tools/ converted or merged, a bare '
            'state dict). Resume from an iter_*.pth of its run (its work dir\'s last_checkpoint '
            f'names the newest), or start a new run from these weights: load_from={path} '
            'without --resume')


def check_resumable(path: str | os.PathLike) -> int:
    """:func:`refuse_unresumable` of the file ``path``, read with its tensors memory-mapped (a
    look at its entries, not a read of its weights): ``tools/train.py`` checks ``--resume`` so
    before the runner is built. Call it on a file :func:`check_checkpoint` has passed.

    Returns:
        The iteration it resumes at (``meta.iter``).
    """
    allow_mmengine_checkpoint_types()
    checkpoint = torch.load(path, map_location='cpu', weights_only=True,
                            mmap=zipfile.is_zipfile(path))
    refuse_unresumable(checkpoint, path)
    return int(checkpoint['meta']['iter'])


def check_archive_records(path: str | os.PathLike, what: str = 'checkpoint') -> None:
    """Read every record of the torch zip archive ``path`` (``torch.save``'s, or a TorchScript
    file's) through zipfile, which compares its CRC-32 at the end: ``torch.load`` checks none.

    A record whose CRC-32 is 0 is not read: ``torch.serialization.set_crc32_options(False)``
    writes 0 for every record (a real CRC-32 is 0 once in 2**32 records).

    Raises:
        CheckpointReadError: the archive has no central directory (a cut-off file), or a record
            is damaged, naming it.
    """
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise _corrupt(path, what, 'its zip archive has no central directory, which a '
                       'cut-off file lacks') from error
    with archive:
        _check_records(archive, path, what)


def _check_records(archive: zipfile.ZipFile, path: str | os.PathLike, what: str) -> None:
    for info in archive.infolist():
        if info.CRC == 0:
            continue
        # zipfile's errors for a damaged CRC-32 or size (BadZipFile, EOFError), compression
        # method (OSError, NotImplementedError, zlib.error) or encryption flag (RuntimeError).
        try:
            with archive.open(info) as record:
                while record.read(_CHUNK):
                    pass
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError,
                zlib.error) as error:
            raise _corrupt(path, what, f'its record {info.filename} is damaged '
                           f'({str(error) or type(error).__name__}): the file changed after '
                           'torch.save wrote it') from error


def _corrupt(path: str | os.PathLike, what: str, reason: str) -> CheckpointReadError:
    return CheckpointReadError(
        f'{path}: truncated or corrupt {what} ({reason}): copy it again, or use another '
        f'{what} (an interrupted save leaves such a file)')


def _refused_message(path: Path, what: str, names: Sequence[str]) -> str:
    """Why a weights-only load refuses ``path``, which pickles the objects ``names`` (the
    first a load met, or all that its pickle names; none where torch's error named none)."""
    # torch's load names a builtin without its module: ``getattr``, not ``builtins.getattr``.
    qualified = sorted(name if '.' in name else f'builtins.{name}' for name in names)
    shown = ', '.join(qualified) or 'objects'
    if any(name.startswith(_MMENGINE_GLOBALS) for name in qualified):
        return (f'{path}: {what} pickles objects that torch.load(weights_only=True) refuses '
                f'({shown}); it was probably written before xmr stored its logs as plain data, '
                'or by a run whose custom_hooks lacked WeightsOnlyCheckpointHook. If '
                "you trust the file, keep only its weights once: torch.save({'state_dict': "
                f"torch.load('{path}', weights_only=False)['state_dict']}}, 'weights.pth')")
    return (f'{path}: not an xmr {what}: it pickles {shown} that a weights-only load refuses; '
            'give a .pth written by xmr')


def meta_records(path: str | os.PathLike, key: str) -> bool:
    """Whether ``path`` is a checkpoint whose ``meta`` records ``key`` (``language_modules`` of
    a merge, ``converted_from`` of a conversion): a tool's own earlier output, which its
    ``--overwrite`` may replace; a file that is no checkpoint, or cannot be read, is not."""
    try:
        checkpoint = read_checkpoint(path)
    except (CheckpointReadError, OSError):
        return False
    meta = checkpoint.get('meta') if isinstance(checkpoint, dict) else None
    return isinstance(meta, dict) and key in meta
