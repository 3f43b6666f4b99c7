"""The weights of a TorchScript archive (OpenAI's released CLIP ``ViT-B-32.pt``), read
without running any of its code.

``torch.jit.load`` compiles the archive's ``code/`` and runs its classes' ``__setstate__``: code
from a file the user did not write. Here its ``data.pkl`` (the module tree) is read by an
unpickler that builds tensors and inert stand-ins of the archive's classes and nothing else;
``code/`` is only scanned as text for which attributes are parameters and buffers, which the
pickle does not record.
"""
from __future__ import annotations

import ast
import collections
import io
import os
import pickle
import re
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

import torch

__all__ = ['read_torchscript_weights', 'is_torchscript', 'is_torchscript_archive',
           'RefusedTorchScriptError']


def is_torchscript(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a TorchScript archive (:func:`is_torchscript_archive`)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return is_torchscript_archive(archive.namelist())


def is_torchscript_archive(names: Iterable[str]) -> bool:
    """Whether a zip archive of records ``names`` is a TorchScript archive
    (``torch.jit.save``'s, which alone writes a ``constants.pkl``)."""
    return any(name.endswith('/constants.pkl') for name in names)


def read_torchscript_weights(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The state dict of a TorchScript archive, as ``torch.jit.load(path).state_dict()`` gives
    it (parameters, then buffers, module by module), without running any of its code.

    Raises:
        RefusedTorchScriptError: a pickle that names any other global than a tensor's or the
            archive's own classes', or a class that restores its state through its own code.
        Exception: an archive that is malformed (whatever the unpickler or zipfile raises).
    """
    with zipfile.ZipFile(path) as archive:
        folder = _torchscript_folder(archive)
        classes = _script_classes(archive, folder)
        root = _TorchScriptUnpickler(archive, folder).load()
    return _script_state_dict(root, classes)


class RefusedTorchScriptError(Exception):
    """A TorchScript archive that could be read only by running its code."""


class _ClassDeclaration(NamedTuple):
    """What a TorchScript archive's ``code/`` declares of one class."""

    #: Attributes holding parameters, and buffers; ``None`` for a class that is no module.
    parameters: frozenset[str] | None
    buffers: frozenset[str]
    #: Whether it restores its state through its own ``__setstate__`` (which jit.load runs).
    sets_own_state: bool


#: A class (and its base), and the lines of its body that say which attributes are parameters
#: and buffers, and whether it has its own ``__setstate__``, as TorchScript prints them.
_CLASS_LINE = re.compile(r'class (\w+)(?:\((\w+)\))?')
_DECLARED = re.compile(r'  (__parameters__|__buffers__) = (\[.*\])\s*')
_OWN_SETSTATE = re.compile(r'  def __setstate__\(')


def _torchscript_folder(archive: zipfile.ZipFile) -> str:
    """The folder every record of a TorchScript archive lies in (its ``constants.pkl``'s)."""
    folders = [name[:-len('/constants.pkl')] for name in archive.namelist()
               if name.endswith('/constants.pkl') and name.count('/') == 1]
    if len(folders) != 1:
        raise ValueError(f'{len(folders)} top folders hold a constants.pkl, not one')
    return folders[0]


def _script_classes(archive: zipfile.ZipFile, folder: str) -> dict[str, _ClassDeclaration]:
    """``{qualified name: declaration}`` of every class in the archive's ``code/``, whose
    files are named after their module: ``code/__torch__/torch/nn/modules/linear.py`` declares
    ``__torch__.torch.nn.modules.linear.Linear``."""
    code = f'{folder}/code/'
    classes = {}
    for name in archive.namelist():
        if name.startswith(code) and name.endswith('.py'):
            module = name[len(code):-len('.py')].replace('/', '.')
            source = archive.read(name).decode('utf-8', errors='replace')
            classes.update((f'{module}.{cls}', declaration)
                           for cls, declaration in _declarations(source, name))
    return classes


def _declarations(source: str, record: str) -> Iterator[tuple[str, _ClassDeclaration]]:
    """The classes of one file of TorchScript code, read line by line (parsed as text, never
    compiled): a class's body is its indented lines."""
    cls, module, declared, sets_own_state = None, False, {}, False
    for line in [*source.splitlines(), 'end']:
        if cls is not None and line[:1] not in ('', ' '):
            yield cls, _declaration(cls, module, declared, sets_own_state, record)
            cls = None
        start = _CLASS_LINE.match(line)
        if start:
            cls, module, declared, sets_own_state = (start.group(1), start.group(2) == 'Module',
                                                     {}, False)
            continue
        found = _DECLARED.fullmatch(line)
        if cls is not None and found:
            names = ast.literal_eval(found.group(2))
            if not all(isinstance(name, str) for name in names):
                raise ValueError(f'{record} declares {found.group(1)} that are not names')
            declared[found.group(1)] = names
        sets_own_state |= cls is not None and bool(_OWN_SETSTATE.match(line))


def _declaration(cls: str, module: bool, declared: Mapping[str, list[str]],
                 sets_own_state: bool, record: str) -> _ClassDeclaration:
    """A class's declaration from the lists its body gave; a module gives both."""
    if module and '__parameters__' not in declared:
        # Without the list its weights would be skipped unseen.
        raise ValueError(f'{record} declares the module {cls} without its __parameters__')
    parameters = declared.get('__parameters__')
    return _ClassDeclaration(None if parameters is None else frozenset(parameters),
                             frozenset(declared.get('__buffers__', ())), sets_own_state)


class _StorageType(NamedTuple):
    """A storage class a pickle names (``torch.HalfStorage``): the dtype of its elements."""

    dtype: torch.dtype


class _Storage(NamedTuple):
    """The bytes of one ``data/<key>`` record, and the dtype they hold."""

    data: torch.UntypedStorage
    dtype: torch.dtype


#: The storage classes a TorchScript pickle names (``torch.HalfStorage``): the dtype each
#: stands for (written out: asking ``torch.HalfStorage.dtype`` warns that it is deprecated).
_STORAGE_DTYPES = {
    'DoubleStorage': torch.float64, 'FloatStorage': torch.float32,
    'HalfStorage': torch.float16, 'BFloat16Storage': torch.bfloat16,
    'LongStorage': torch.int64, 'IntStorage': torch.int32, 'ShortStorage': torch.int16,
    'CharStorage': torch.int8, 'ByteStorage': torch.uint8, 'BoolStorage': torch.bool,
    'ComplexFloatStorage': torch.complex64, 'ComplexDoubleStorage': torch.complex128}


class _ScriptObject:
    """An inert stand-in for an object of one of the archive's own (``__torch__``) classes:
    its state as the pickle gives it (a module's: a dict of attributes), none of its code."""

    qualified_name = ''
    state: object = None

    def __init__(self, *args: object) -> None:
        self.state = args

    def __setstate__(self, state: object) -> None:
        self.state = state


class _TorchScriptUnpickler(pickle.Unpickler):
    """Reads a TorchScript archive's ``data.pkl``, building tensors (from its ``data/``
    records) and :class:`_ScriptObject` stand-ins, and refusing any other global.

    What it hands the pickle are bound methods, ``NamedTuple``s, ``OrderedDict`` and classes
    of its own, so that a pickle's BUILD can change nothing beyond this one read.
    """

    def __init__(self, archive: zipfile.ZipFile, folder: str) -> None:
        super().__init__(io.BytesIO(archive.read(f'{folder}/data.pkl')))
        self._archive, self._folder = archive, folder
        order = f'{folder}/byteorder'
        # Archives older than the record (OpenAI's, torch 1.7) were written little-endian.
        self._byte_order = (archive.read(order).decode().strip()
                            if order in archive.namelist() else 'little')
        self._storages: dict[str, _Storage] = {}
        self._classes: dict[str, type[_ScriptObject]] = {}
        same = self._same
        self._globals: dict[tuple[str, str], object] = {
            ('torch._utils', '_rebuild_tensor_v2'): self._tensor,
            ('torch._utils', '_rebuild_parameter'): self._parameter,
            ('collections', 'OrderedDict'): collections.OrderedDict,
            # TorchScript tags typed lists and dicts with these identities (torch.jit._pickle).
            **{('torch.jit._pickle', name): same for name in (
                'restore_type_tag', 'build_intlist', 'build_tensorlist', 'build_doublelist',
                'build_boollist')}}

    def find_class(self, module: str, name: str) -> object:
        if module == '__torch__' or module.startswith('__torch__.'):
            return self._script_class(f'{module}.{name}')
        if module == 'torch' and name in _STORAGE_DTYPES:
            return _StorageType(_STORAGE_DTYPES[name])
        if (module, name) in self._globals:
            return self._globals[module, name]
        raise RefusedTorchScriptError(f'its data.pkl names the global {module}.{name}, where only '
                              'tensors and the modules of the archive may be')

    def persistent_load(self, pid: object) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == 'storage'
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)
                and isinstance(pid[4], int)):
            raise pickle.UnpicklingError(f'data.pkl refers to {pid!r}, not to a storage')
        _, storage_type, key, _location, numel = pid
        if key not in self._storages:
            self._storages[key] = self._read_storage(key, storage_type.dtype, numel)
        storage = self._storages[key]
        if storage.dtype != storage_type.dtype:
            raise pickle.UnpicklingError(f'data.pkl reads its storage {key} as both '
                                         f'{storage.dtype} and {storage_type.dtype}')
        return storage

    def _read_storage(self, key: str, dtype: torch.dtype, numel: int) -> _Storage:
        record = f'{self._folder}/data/{key}'
        data = self._archive.read(record)
        if len(data) != numel * dtype.itemsize:
            raise pickle.UnpicklingError(f'its record {record} holds {len(data)} bytes, not '
                                         f'the {numel} {dtype} elements data.pkl gives it')
        # from_buffer copies into a storage of this machine's byte order.
        return _Storage(torch.UntypedStorage.from_buffer(data, byte_order=self._byte_order,
                                                         dtype=dtype), dtype)

    def _script_class(self, qualified_name: str) -> type[_ScriptObject]:
        if qualified_name not in self._classes:
            self._classes[qualified_name] = type(
                '_ScriptObject', (_ScriptObject,), {'qualified_name': qualified_name})
        return self._classes[qualified_name]

    # Methods, not functions: a pickle's BUILD can set no attribute of a bound method.
    def _same(self, value: object, *_: object) -> object:
        return value

    def _parameter(self, data: torch.Tensor, *_: object) -> torch.Tensor:
        return data

    def _tensor(self, storage: object, offset: object, size: object, stride: object,
                _requires_grad: object = False, _hooks: object = None,
                metadata: object = None) -> torch.Tensor:
        """A view of ``storage`` (``torch._utils._rebuild_tensor_v2``'s arguments; the
        ``requires_grad`` flag and hooks are dropped, as ``state_dict()`` drops them), checked
        to lie inside it: ``Tensor.set_`` would grow the storage instead."""
        if not (isinstance(storage, _Storage) and _is_count(offset)
                and isinstance(size, tuple) and isinstance(stride, tuple)
                and len(size) == len(stride) and all(map(_is_count, size + stride))):
            raise pickle.UnpicklingError('data.pkl builds a tensor from other than a storage, '
                                         'an offset, a size and strides')
        if metadata:  # the conjugate and negative bits of torch.save's views, never jit's
            raise pickle.UnpicklingError(f'data.pkl gives a tensor the metadata {metadata!r}')
        last = offset + sum((length - 1) * step for length, step in zip(size, stride))
        end = (last + 1) * storage.dtype.itemsize if all(size) else 0
        if end > storage.data.nbytes():
            raise pickle.UnpicklingError(f'data.pkl views {end} bytes of a storage of '
                                         f'{storage.data.nbytes()}')
        return torch.empty(0, dtype=storage.dtype).set_(storage.data, offset, size, stride)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _script_state_dict(root: object, classes: Mapping[str, _ClassDeclaration]
                       ) -> dict[str, torch.Tensor]:
    """``state_dict()`` of the module tree ``root``: each module's parameters, then its
    buffers, in the order of its attributes, then its submodules' under ``<name>.``.

    Non-persistent buffers are kept, as ``torch.jit.load(...).state_dict()`` keeps them: an
    archive does not record which buffers were (``__buffers__`` lists them all).
    """
    if not isinstance(root, _ScriptObject):
        raise pickle.UnpicklingError(f'its data.pkl holds a {type(root).__name__}, not a module')
    state_dict: dict[str, torch.Tensor] = {}
    _add_module_state(root, '', classes, state_dict, set())
    return state_dict


def _add_module_state(module: _ScriptObject, prefix: str,
                      classes: Mapping[str, _ClassDeclaration],
                      state_dict: dict[str, torch.Tensor], ancestors: set[int]) -> None:
    declaration = classes.get(module.qualified_name)
    if declaration is None:
        raise pickle.UnpicklingError(f'its code/ declares no class {module.qualified_name}, '
                                     f'which its data.pkl holds ({prefix or "the root"})')
    if declaration.parameters is None:  # an object of a TorchScript class, no module
        return
    if declaration.sets_own_state:
        raise RefusedTorchScriptError(f'its module {prefix.rstrip(".") or "(the root)"} of class '
                              f'{module.qualified_name} sets its state through its own '
                              '__setstate__, which torch.jit.load would run')
    attributes = module.state
    if not isinstance(attributes, dict) or id(module) in ancestors:
        raise pickle.UnpicklingError(f'its data.pkl gives the module {module.qualified_name} '
                                     'no attributes by name, or itself among its submodules')
    for names in (declaration.parameters, declaration.buffers):
        for name, value in attributes.items():
            if name in names and value is not None:  # state_dict() skips None as well
                if not isinstance(value, torch.Tensor):
                    raise pickle.UnpicklingError(f'its {prefix}{name} is a '
                                                 f'{type(value).__name__}, not a tensor')
                state_dict[prefix + name] = value
    for name, value in attributes.items():
        if isinstance(value, _ScriptObject):
            _add_module_state(value, f'{prefix}{name}.', classes, state_dict,
                              ancestors | {id(module)})
