"""Reading released weight files and checking that they fit a module, with errors that say why.

Released checkpoints come as torch pickles (``pytorch_model.bin``, ``.pt``, ``.pth``, sometimes
wrapped in ``{'state_dict': ...}`` or ``{'model': ...}`` (Microsoft's Swin and DeiT) or saved
from a ``DataParallel`` with ``module.`` prefixes),
safetensors files, or TorchScript archives (OpenAI's CLIP ``ViT-B-32.pt``, whose tensors alone
are read: none of the code it holds is run). :func:`read_weights` turns any of them into a state
dict; :func:`check_weights_fit` compares a state dict with what a
module expects and refuses, before anything is copied, with the missing, unexpected and
differently shaped keys (counts and the first few) and the fix.
"""
from __future__ import annotations

import json
import pickle
import re
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

import torch

from xmr.datasets.media_files import LFS_POINTER, LFS_POINTER_HEAD, is_lfs_pointer
from xmr.models.torchscript_weights import (
    RefusedTorchScriptError,
    is_torchscript,
    read_torchscript_weights,
)
from xmr.utils.listing import first_few

__all__ = ['read_weights', 'weights_file', 'check_weights_fit', 'strict_load_refusal',
           'fetch_weights', 'WeightsMismatchError', 'CHECKPOINT_SUFFIXES', 'unreadable_file',
           'nonfinite_keys', 'transformers_layout_key', 'refuse_foreign_file']

Fetched = TypeVar('Fetched')

#: Endings of weight files: a name ending so is a path, never a hub name or tag.
CHECKPOINT_SUFFIXES = ('.pt', '.pth', '.bin', '.safetensors')
#: Files looked for, in order, when a folder is given (Hugging Face's names).
HF_WEIGHT_FILES = ('model.safetensors', 'pytorch_model.bin')
#: How Hugging Face names the index of a file saved in shards (``save_pretrained``'s
#: ``max_shard_size``): ``model.safetensors.index.json``, whose ``weight_map`` names each key's
#: shard.
SHARD_INDEX_SUFFIX = '.index.json'
#: Parts of key names found only in Hugging Face transformers' layouts of vision and CLIP
#: models, which open_clip and timm name otherwise (``visual.``, ``patch_embed.proj``).
TRANSFORMERS_LAYOUT_MARKS = ('text_model.', 'vision_model.', 'embeddings.patch_embeddings.')

#: Keys under which a file may hold its state dict, first found wins.
WRAPPER_KEYS = ('state_dict', 'model')

_SHOWN_KEYS = 5
_QUOTED = re.compile(r'"([^"]+)"')
_RESHAPED = re.compile(r'size mismatch for (\S+): copying a param with shape '
                       r'torch\.Size\((\[.*?\])\) from checkpoint, the shape in current model '
                       r'is torch\.Size\((\[.*?\])\)')


class WeightsMismatchError(ValueError):
    """A state dict whose keys or shapes are not those of the module it was meant for."""


def fetch_weights(fetch: Callable[[], Fetched], what: str, local_copy: str,
                  failures: tuple[type[Exception], ...] = (OSError,),
                  raised: type[FileNotFoundError] = FileNotFoundError) -> Fetched:
    """``fetch()``: a download, or a read of a hub's local cache; its failure (no network, no
    such repository, a checksum) is told as a missing file, with how to give a local copy.

    Args:
        fetch: what downloads or reads the weights.
        what: the weights and where they come from (``"the 'openai' weights of ViT-B-32
            (hf-hub:timm/...)"``).
        local_copy: how a config gives a copy instead (the keys to set).
        failures: the errors of a fetch: hub clients raise ``OSError`` (no network, no such
            repository, not in the cache); what the loading itself raises passes unchanged.
        raised: the class of the error raised, a ``FileNotFoundError`` of the caller's own
            where a caller up the stack tells it apart (a tokenizer's, which the backbone
            building it names by its config key).

    Raises:
        FileNotFoundError: (``raised``) naming ``what``, the fetch's first line of error and
            ``local_copy`` (the fetch's error chained as the cause).
    """
    try:
        return fetch()
    except failures as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise raised(f'{what} could not be fetched ({reason}); {local_copy}') from error


def read_weights(path: str | Path, what: str = 'checkpoint',
                 folder_files: Iterable[str] = HF_WEIGHT_FILES) -> dict[str, torch.Tensor]:
    """The state dict held by a weight file (or by the first of ``folder_files`` in a folder,
    whole or in shards).

    Args:
        path: a ``.safetensors`` file, a torch file (pickle or TorchScript archive), the
            ``.index.json`` of a file saved in shards, or a folder.
        what: what the file should be, for the errors (``'OpenAI CLIP checkpoint'``).
        folder_files: names looked for inside a folder, first found wins.

    Returns:
        ``{key: tensor}`` on the CPU, unwrapped from ``{'state_dict': ...}``, ``{'model': ...}``
        and ``module.``.

    Raises:
        FileNotFoundError: no such file, a folder without any of ``folder_files``, or a shard
            an index names that is not beside it.
        ValueError: a file that is truncated, damaged (a torch archive's record failing its
            CRC-32), empty, a Git LFS pointer, not a weight file, pickles Python objects, or
            holds something other than tensors by name; a TorchScript archive that could be
            read only by running what it holds; shards that lack keys their index gives them.
    """
    path = weights_file(path, what, folder_files)
    if path.name.endswith(SHARD_INDEX_SUFFIX):
        return _read_shards(path, what)
    loaded = _read_file(path, what)
    for wrapper in WRAPPER_KEYS:
        if isinstance(loaded, Mapping) and isinstance(loaded.get(wrapper), Mapping):
            loaded = loaded[wrapper]
            break
    if not isinstance(loaded, Mapping):
        raise ValueError(f'{path} is not a {what}: it holds a {type(loaded).__name__}, not '
                         'tensors by name (a state dict)')
    others = [str(k) for k, v in loaded.items()
              if not (isinstance(k, str) and isinstance(v, torch.Tensor))]
    if others:
        raise ValueError(f'{path} is not a {what}: {len(others)} of its entries are not tensors '
                         f'by name ({first_few(others)}): give the state dict alone '
                         '(torch.save(model.state_dict(), ...))')
    if loaded and all(key.startswith('module.') for key in loaded):
        return {key[len('module.'):]: value for key, value in loaded.items()}
    return dict(loaded)


def weights_file(path: str | Path, what: str = 'checkpoint',
                 folder_files: Iterable[str] = HF_WEIGHT_FILES) -> Path:
    """The file :func:`read_weights` reads for ``path``: ``path`` itself, or in a folder the
    first of ``folder_files`` found, whole or as its shards' index (``<name>.index.json``).

    Raises:
        FileNotFoundError: no such file, or a folder without any of ``folder_files``.
    """
    path = Path(path)
    if path.is_dir():
        found = [path / file for name in folder_files
                 for file in (name, name + SHARD_INDEX_SUFFIX) if (path / file).is_file()]
        if not found:
            raise FileNotFoundError(f'{what} folder {path} holds none of {list(folder_files)}, '
                                    f'whole or in shards (<name>{SHARD_INDEX_SUFFIX})')
        return found[0]
    if not path.is_file():
        raise FileNotFoundError(f'{what} {path} does not exist')
    return path


def _read_shards(index: Path, what: str) -> dict[str, torch.Tensor]:
    """The state dict of a file saved in shards, read shard by shard as ``index``'s
    ``weight_map`` (``{key: shard file name}``) names them."""
    try:
        weight_map = json.loads(index.read_text(encoding='utf-8'))['weight_map']
        shards = sorted(set(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f'{index} is not the index of a {what} saved in shards: no '
                         f'"weight_map" of key -> shard file ({error!r})') from error
    state_dict = {}
    for shard in shards:
        state_dict.update(read_weights(index.parent / shard, f'shard of {what} ({index.name})'))
    lacking = weight_map.keys() - state_dict.keys()
    if lacking:
        raise ValueError(f'the shards of {index} lack {len(lacking)} keys its weight_map gives '
                         f'them ({first_few(lacking)}): a shard of another save; download the '
                         'shards and their index again')
    return state_dict


def transformers_layout_key(keys: Iterable[str]) -> str | None:
    """The first of ``keys`` named as only Hugging Face transformers names vision and CLIP
    weights (``vision_model.``, ``swin.embeddings.patch_embeddings.``), or ``None``: weights in
    a layout that open_clip and timm do not read, whatever model they are of."""
    return next((key for key in keys if any(
        key.startswith(mark) or f'.{mark}' in key for mark in TRANSFORMERS_LAYOUT_MARKS)), None)


def refuse_foreign_file(path: Path, what: str, torch_file: bool = True) -> None:
    """Refuse a file no loader of ``what`` reads, before one fails on it in its own words.

    Torch's safe loader stops on bytes that are no ``torch.save`` file (a login page a
    download saved) with its advice that ``weights_only=False`` "will likely succeed", which
    it would not, and would run whatever the bytes pickle.

    Args:
        torch_file: whether ``path`` should be a ``torch.save`` file (a zip archive or a
            pickle), checked by how it begins (:func:`~xmr.engine.checkpoint.torch_save_head`).

    Raises:
        ValueError: a Git LFS pointer (a clone of a Hugging Face repository made without Git
            LFS holds them under the weights' names), or a file of another kind, naming it.
    """
    # xmr.engine imports the models: here, not at the top.
    from xmr.engine.checkpoint import torch_save_head

    size = path.stat().st_size
    with path.open('rb') as file:
        head = file.read(LFS_POINTER_HEAD)
    if is_lfs_pointer(head, size):
        raise ValueError(f'{path} ({size} bytes) is not a readable {what}: it is {LFS_POINTER}')
    if torch_file and torch_save_head(path) is None:
        raise ValueError(unreadable_file(
            path, what, 'it is empty' if not size else 'neither a torch file nor safetensors'))


def _read_file(path: Path, what: str) -> object:
    """What a torch, TorchScript or safetensors file holds."""
    # xmr.engine imports the models: here, not at the top.
    from xmr.engine.checkpoint import check_archive_records

    refuse_foreign_file(path, what, torch_file=path.suffix != '.safetensors')
    if path.suffix != '.safetensors' and zipfile.is_zipfile(path):
        # torch.load and torch.jit.load check no record's CRC-32: a damaged tensor would load
        # as other numbers.
        check_archive_records(path, what)
    if path.suffix == '.safetensors':
        return _read_safetensors(path, what)
    if is_torchscript(path):
        return _read_torchscript(path, what)
    return _read_pickle(path, what)


def _read_torchscript(path: Path, what: str) -> dict[str, torch.Tensor]:
    """:func:`~xmr.models.torchscript_weights.read_torchscript_weights`, its refusals and
    failures naming the file."""
    try:
        return read_torchscript_weights(path)
    except RefusedTorchScriptError as error:
        raise ValueError(f'{path} is a TorchScript archive that xmr refuses to read: {error}. '
                         'xmr takes only the tensors of such a file and runs nothing it holds; '
                         f'a released {what} needs nothing else: download it again, or re-save '
                         'the weights of a model you trust with torch.save(model.state_dict(), '
                         "'weights.pt')") from None
    except Exception as error:  # noqa: BLE001 - a malformed pickle fails anywhere
        raise ValueError(unreadable_file(path, what, error)) from error


def _read_safetensors(path: Path, what: str) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise ValueError(unreadable_file(path, what, error)) from error


def _read_pickle(path: Path, what: str) -> object:
    """What ``torch.load`` reads of ``path`` (a ``torch.save`` file: :func:`refuse_foreign_file`
    has seen it begin as one) with its safe unpickler."""
    try:
        return torch.load(path, map_location='cpu', weights_only=True)
    except pickle.UnpicklingError as error:
        if 'Weights only load failed' in str(error):
            raise ValueError(f'{path} pickles Python objects besides tensors, which the safe '
                             f'loader refuses; if you trust the file, re-save its weights once: '
                             f"torch.save(torch.load('{path}', weights_only=False)"
                             f"['state_dict'], 'weights.pt')") from error
        raise ValueError(unreadable_file(path, what, error)) from error
    except (RuntimeError, EOFError, OSError) as error:
        raise ValueError(unreadable_file(path, what, error)) from error
    except Exception as error:  # noqa: BLE001 - arbitrary bytes break the unpickler anywhere
        raise ValueError(unreadable_file(path, what, 'neither a torch file nor safetensors')
                         ) from error


def unreadable_file(path: Path, what: str, error: Exception | str) -> str:
    """The message for a file ``path`` that a loader failed on (``error``, its first line):
    its size, ``what`` it should be, and what to do."""
    reason = (str(error).strip().splitlines()[0].rstrip('.') if str(error).strip()
              else type(error).__name__)
    return (f'{path} ({path.stat().st_size} bytes) is not a readable {what}: {reason}. A '
            'truncated download or a file of another kind; download the file again')


def nonfinite_keys(state_dict: Mapping[str, torch.Tensor]) -> list[str]:
    """The keys whose (floating) tensors hold NaN or infinite values, sorted: weights of a run
    that diverged before it saved, or of a file damaged where no CRC-32 guards it."""
    return sorted(key for key, value in state_dict.items()
                  if value.is_floating_point() and not torch.isfinite(value).all())


def check_weights_fit(expected: Mapping[str, torch.Tensor], state_dict: Mapping[str, torch.Tensor],
                      source: str, target: str, fix: str) -> None:
    """Refuse a state dict that does not give every expected key with its shape, and no other.

    Args:
        expected: the module's own ``state_dict()`` (only keys and shapes are read, so a model
            on the ``meta`` device works).
        state_dict: the weights to load.
        source: where they come from (a path), first word of the error.
        target: what they were meant for (``'open_clip ViT-B-32'``).
        fix: the sentence that ends the error: what to change.

    Raises:
        WeightsMismatchError: naming the missing, unexpected and differently shaped keys.
    """
    missing = [key for key in expected if key not in state_dict]
    unexpected = [key for key in state_dict if key not in expected]
    reshaped = [f'{key} (file {list(state_dict[key].shape)}, model {list(value.shape)})'
                for key, value in expected.items()
                if key in state_dict and state_dict[key].shape != value.shape]
    if missing or unexpected or reshaped:
        raise _mismatch(source, target, missing, unexpected, reshaped, fix)


def strict_load_refusal(error: RuntimeError, source: str, target: str, fix: str
                        ) -> WeightsMismatchError | None:
    """torch's refusal of a strict ``load_state_dict`` (its ``Missing key(s)``, ``Unexpected
    key(s)`` and ``size mismatch`` lines) told as :func:`check_weights_fit` tells it: the keys as
    the module was given them, after whatever a loader renamed (timm's filters); ``None`` for
    another error."""
    lines = str(error).splitlines()
    missing = [key for line in lines if 'Missing key(s)' in line for key in _QUOTED.findall(line)]
    unexpected = [key for line in lines if 'Unexpected key(s)' in line
                  for key in _QUOTED.findall(line)]
    reshaped = [f'{key} (file {file}, model {model})'
                for key, file, model in _RESHAPED.findall(str(error))]
    if not (missing or unexpected or reshaped):
        return None
    return _mismatch(source, target, missing, unexpected, reshaped, fix)


def _mismatch(source: str, target: str, missing: list[str], unexpected: list[str],
              reshaped: list[str], fix: str) -> WeightsMismatchError:
    parts = [_listing(title, keys) for title, keys in (
        ('missing', missing), ('unexpected', unexpected), ('with another shape', reshaped))
        if keys]
    return WeightsMismatchError(f'{source} does not fit {target}: {"; ".join(parts)}. {fix}')


def _listing(title: str, keys: list[str]) -> str:
    return f'{len(keys)} {title} ({first_few(keys, _SHOWN_KEYS)})'
