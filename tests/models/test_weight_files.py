"""Weight files of every released format read alike; unreadable or unfitting ones are named."""
from __future__ import annotations

import json
import pickle
import re
import warnings
import zipfile
from collections import OrderedDict

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from tests.models.backbones.openai_clip_layout import save_openai_torchscript
from tests.zip_records import damage_record
from xmr.models.weight_files import (
    WeightsMismatchError,
    check_weights_fit,
    nonfinite_keys,
    read_weights,
    strict_load_refusal,
    transformers_layout_key,
    weights_file,
)

STATE = {'encoder.weight': torch.arange(6.0).view(2, 3), 'encoder.bias': torch.tensor([1.0, 2.0])}


def _assert_state(loaded):
    assert set(loaded) == set(STATE)
    for key, value in STATE.items():
        assert torch.equal(loaded[key], value)


@pytest.mark.parametrize('payload', [
    STATE, {'state_dict': STATE, 'epoch': 3}, {'model': STATE, 'epoch': 300},
    {f'module.{k}': v for k, v in STATE.items()}],
    ids=['plain', 'wrapped', 'wrapped-as-model', 'data-parallel'])
def test_torch_files_in_every_wrapping(tmp_path, payload):
    path = tmp_path / 'weights.pt'
    torch.save(payload, path)
    _assert_state(read_weights(path))


def test_safetensors_and_hugging_face_folders(tmp_path):
    save_file(STATE, str(tmp_path / 'model.safetensors'))
    torch.save({k: v + 1 for k, v in STATE.items()}, tmp_path / 'pytorch_model.bin')
    _assert_state(read_weights(tmp_path / 'model.safetensors'))
    _assert_state(read_weights(tmp_path))  # safetensors first, as Hugging Face prefers
    (tmp_path / 'model.safetensors').unlink()
    assert torch.equal(read_weights(tmp_path)['encoder.bias'], torch.tensor([2.0, 3.0]))


@pytest.mark.parametrize('name, save', [
    ('model.safetensors', lambda state, path: save_file(state, str(path))),
    ('pytorch_model.bin', lambda state, path: torch.save(state, path))])
def test_a_folder_saved_in_shards_reads_as_its_index_maps_them(tmp_path, name, save):
    """save_pretrained(max_shard_size=...) writes <name>.index.json and shards: the folder was
    refused as holding no weights."""
    stem, suffix = name.split('.')
    shards = {f'{stem}-00001-of-00002.{suffix}': {'encoder.weight': STATE['encoder.weight']},
              f'{stem}-00002-of-00002.{suffix}': {'encoder.bias': STATE['encoder.bias']}}
    for shard, part in shards.items():
        save(part, tmp_path / shard)
    weight_map = {key: shard for shard, part in shards.items() for key in part}
    (tmp_path / f'{name}.index.json').write_text(json.dumps(
        {'metadata': {'total_size': 32}, 'weight_map': weight_map}))
    assert weights_file(tmp_path) == tmp_path / f'{name}.index.json'
    _assert_state(read_weights(tmp_path))
    weight_map['encoder.scale'] = f'{stem}-00002-of-00002.{suffix}'
    (tmp_path / f'{name}.index.json').write_text(json.dumps({'weight_map': weight_map}))
    with pytest.raises(ValueError, match=r'shards of .*index\.json lack 1 keys its weight_map '
                                         r'gives them \(encoder\.scale\)'):
        read_weights(tmp_path)
    (tmp_path / f'{stem}-00002-of-00002.{suffix}').unlink()
    with pytest.raises(FileNotFoundError, match=rf'{stem}-00002-of-00002\.{suffix} does not'):
        read_weights(tmp_path)
    (tmp_path / f'{name}.index.json').write_text('{"metadata": {}}')
    with pytest.raises(ValueError, match=r'index\.json is not the index of a checkpoint saved '
                                         r'in shards: no "weight_map"'):
        read_weights(tmp_path)


def test_keys_only_transformers_gives_vision_and_clip_weights_are_told_apart():
    assert transformers_layout_key(['logit_scale', 'vision_model.embeddings.class_embedding']
                                   ) == 'vision_model.embeddings.class_embedding'
    assert transformers_layout_key(['classifier.weight',
                                    'swin.embeddings.patch_embeddings.projection.weight']
                                   ) == 'swin.embeddings.patch_embeddings.projection.weight'
    assert transformers_layout_key(['embeddings.patch_embeddings.projection.bias']) is not None
    # open_clip's own names, its Hugging Face text towers' included, and timm's.
    assert transformers_layout_key(['visual.conv1.weight', 'text.transformer.embeddings.'
                                    'word_embeddings.weight', 'patch_embed.proj.weight',
                                    'visual.trunk.patch_embed.proj.weight']) is None


def test_torchscript_archive_gives_its_state_dict(tmp_path):
    path = tmp_path / 'ViT-B-32.pt'
    save_openai_torchscript(STATE, path, input_resolution=224, context_length=77, vocab_size=9)
    loaded = read_weights(path)
    assert int(loaded.pop('input_resolution')) == 224 and int(loaded.pop('vocab_size')) == 9
    assert int(loaded.pop('context_length')) == 77
    _assert_state(loaded)


class _Block(nn.Module):
    """A residual attention block as OpenAI's: attention, layer norms, a named MLP, and a
    non-persistent buffer (open_clip's ``attn_mask`` is one)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(width, 2)
        self.ln_1 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(OrderedDict([
            ('c_fc', nn.Linear(width, 2 * width)), ('gelu', nn.GELU()),
            ('c_proj', nn.Linear(2 * width, width))]))
        self.ln_2 = nn.LayerNorm(width)
        self.register_buffer('attn_mask', torch.full((3, 3), -1e4).triu(1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.ln_2(x))


class _Transformer(nn.Module):
    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.resblocks = nn.ModuleList(_Block(width) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.resblocks:
            x = block(x)
        return x


class _Visual(nn.Module):
    def __init__(self, width: int, embed: int) -> None:
        super().__init__()
        self.class_embedding = nn.Parameter(torch.randn(width))
        self.conv1 = nn.Conv2d(3, width, 2, 2, bias=False)
        self.transformer = _Transformer(width, 2)
        self.proj = nn.Parameter(torch.randn(width, embed))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.conv1(image).flatten(2).transpose(1, 2) + self.class_embedding
        return self.transformer(x) @ self.proj


class _Clip(nn.Module):
    """OpenAI's CLIP in miniature, with what a state dict must tell apart: parameters on the
    root, a buffer registered between them, nested modules and a ModuleList, buffers viewing
    one shared storage (transposed, at an offset), a plain tensor attribute and a ``None``
    buffer (neither in a state dict)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.positional_embedding = nn.Parameter(torch.randn(3, 4))
        self.register_buffer('input_resolution', torch.tensor(224))
        self.text_projection = nn.Parameter(torch.randn(4, 2))
        self.logit_scale = nn.Parameter(torch.tensor(4.6052))
        self.visual = _Visual(4, 2)
        self.transformer = _Transformer(4, 1)
        self.token_embedding = nn.Embedding(9, 4)
        self.ln_final = nn.LayerNorm(4)
        self.register_buffer('flags', torch.tensor([True, False]))
        self.register_buffer('absent', None)
        self.scratch = torch.zeros(2)
        self.to(dtype)
        base = torch.randn(24).to(dtype)
        self.register_buffer('shared_t', base[4:16].view(3, 4).t())
        self.register_buffer('shared_tail', base[10:])

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.visual(image) * self.logit_scale.exp()


def jit_save(path, model: nn.Module, example: torch.Tensor | None = None) -> None:
    """Save ``model`` scripted, or traced on ``example`` (OpenAI's releases were traced: their
    classes are named ``___torch_mangle_N``)."""
    with warnings.catch_warnings():  # the format is OpenAI's, deprecated or not
        warnings.simplefilter('ignore')
        torch.jit.save(torch.jit.script(model) if example is None
                       else torch.jit.trace(model, example), str(path))


def _jit_state_dict(path) -> dict[str, torch.Tensor]:
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return dict(torch.jit.load(str(path), map_location='cpu').state_dict())


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def _shared(state: dict[str, torch.Tensor]) -> list[list[str]]:
    """The groups of keys whose tensors view one storage."""
    groups: dict[int, list[str]] = {}
    for key, value in state.items():
        groups.setdefault(value.untyped_storage().data_ptr(), []).append(key)
    return sorted(keys for keys in groups.values() if len(keys) > 1)


def _assert_same_tensors(loaded: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]):
    assert list(loaded) == list(expected)  # the same keys, in the same order
    for key, value in expected.items():
        got = loaded[key]
        assert (got.dtype, got.shape, got.stride(), got.storage_offset(), got.requires_grad) == \
            (value.dtype, value.shape, value.stride(), value.storage_offset(), False), key
        assert torch.equal(_bytes(got), _bytes(value)), key
    assert _shared(loaded) == _shared(expected)


@pytest.mark.parametrize('how, dtype', [('script', torch.float32), ('script', torch.float16),
                                        ('trace', torch.float32), ('trace', torch.float16)])
def test_a_torchscript_archive_reads_as_jit_load_gives_it_without_jit_load(
        tmp_path, monkeypatch, how, dtype):
    """Its tensors alone, bit for bit, in jit.load's names and order: jit.load compiles the
    archive's code and runs its __setstate__, code from a file the user did not write."""
    path = tmp_path / 'ViT-B-32.pt'
    jit_save(path, _Clip(dtype), None if how == 'script' else torch.ones(1, 3, 4, 4, dtype=dtype))
    expected = _jit_state_dict(path)
    # What jit.load's state dict holds, which the reader must match: a non-persistent buffer
    # (an archive does not record which were), no plain tensor attribute, no None buffer.
    assert 'visual.transformer.resblocks.1.attn_mask' in expected
    assert not {'scratch', 'absent'} & set(expected)
    assert expected['visual.proj'].dtype == dtype
    assert _shared(expected) == [['shared_t', 'shared_tail']]

    def refuse(*_, **__):
        raise AssertionError('torch.jit.load ran')

    monkeypatch.setattr(torch.jit, 'load', refuse)
    _assert_same_tensors(read_weights(path), expected)


def _rewrite(path, change) -> None:
    """Rewrite the records of the zip archive ``path`` through ``change(name, data)`` (a
    record it maps to ``None`` left out); zipfile writes each record's CRC-32 anew, so the
    archive passes its check."""
    with zipfile.ZipFile(path) as archive:
        records = {info.filename: archive.read(info) for info in archive.infolist()}
    with zipfile.ZipFile(path, 'w') as archive:
        for name, data in records.items():
            if (changed := change(name, data)) is not None:
                archive.writestr(name, changed)


def test_an_archive_without_a_byte_order_record_is_read_little_endian(tmp_path):
    """OpenAI's ``ViT-B-32.pt`` (torch 1.7) has no ``byteorder`` record: its storages are
    little-endian, and read otherwise every weight would be byte-swapped without a word."""
    path = tmp_path / 'ViT-B-32.pt'
    jit_save(path, nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4)).half())
    expected = _jit_state_dict(path)
    _rewrite(path, lambda name, data: None if name.endswith('/byteorder') else data)
    with zipfile.ZipFile(path) as archive:
        assert not [name for name in archive.namelist() if name.endswith('byteorder')]
    _assert_same_tensors(read_weights(path), expected)


def test_a_big_endian_torchscript_archive_reads_in_this_machines_byte_order(tmp_path):
    path = tmp_path / 'ViT-B-32.pt'
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4)).half()
    model.register_buffer('view', model[0].weight.detach().t()[1:])
    jit_save(path, model)
    expected = _jit_state_dict(path)

    def to_big_endian(name, data):  # every storage holds fp16: two bytes an element
        if name.endswith('/byteorder'):
            return b'big'
        if '/data/' in name:
            return b''.join(data[i:i + 2][::-1] for i in range(0, len(data), 2))
        return data

    _rewrite(path, to_big_endian)
    _assert_same_tensors(read_weights(path), expected)


def _payload(module: str, name: str, argument: str) -> bytes:
    """Pickle opcodes that call ``module.name(argument)`` and drop the result."""
    encoded = argument.encode()
    return (f'c{module}\n{name}\n'.encode() + b'X' + len(encoded).to_bytes(4, 'little')
            + encoded + b'\x85R0')


@pytest.mark.parametrize('module, name, call', [
    ('os', 'mkdir', '{marker}'), ('builtins', 'eval', "__import__('os').mkdir({marker!r})")])
def test_a_torchscript_archive_naming_another_global_is_refused_unrun(tmp_path, module, name,
                                                                       call):
    """A tampered data.pkl: refused naming the file and the global, which is not called."""
    path, marker = tmp_path / 'ViT-B-32.pt', tmp_path / 'marker'
    jit_save(path, nn.Linear(2, 2))
    payload = _payload(module, name, call.format(marker=str(marker)))
    _rewrite(path, lambda record, data: data[:2] + payload + data[2:]
             if record.endswith('/data.pkl') else data)
    with zipfile.ZipFile(path) as archive:  # the payload runs under a plain unpickler
        pickled = archive.read(next(n for n in archive.namelist() if n.endswith('/data.pkl')))
    with pytest.raises(ModuleNotFoundError, match='__torch__'):
        pickle.loads(pickled)
    assert marker.is_dir()
    marker.rmdir()
    with pytest.raises(ValueError, match=rf'{re.escape(str(path))} is a TorchScript archive '
                       rf'that xmr refuses to read: its data\.pkl names the global '
                       rf'{module}\.{name}, where only tensors and the modules of the archive '
                       'may be'):
        read_weights(path, 'CLIP checkpoint')
    assert not marker.exists()


class _SetsItsOwnState(nn.Module):
    """A module whose archive restores it through its own TorchScript ``__setstate__``, which
    jit.load runs: here it prints and doubles the weight."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight

    @torch.jit.export
    def __getstate__(self) -> tuple[torch.Tensor, bool]:
        return self.weight, self.training

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, bool]) -> None:
        print('the archive ran its code')
        self.weight = state[0] * 2
        self.training = state[1]


def test_a_torchscript_archive_whose_code_sets_its_state_is_refused_unrun(tmp_path, capfd):
    path = tmp_path / 'ViT-B-32.pt'
    jit_save(path, _SetsItsOwnState())
    capfd.readouterr()
    with pytest.raises(ValueError, match=r'refuses to read: its module \(the root\) of class '
                                         r'__torch__\.[\w.]*_SetsItsOwnState sets its state '
                                         r'through its own __setstate__, which torch\.jit\.load '
                                         'would run'):
        read_weights(path)
    assert 'the archive ran its code' not in capfd.readouterr().out


def test_a_torchscript_record_shorter_than_its_storage_is_refused(tmp_path):
    path = tmp_path / 'ViT-B-32.pt'
    jit_save(path, nn.Linear(2, 2))
    _rewrite(path, lambda name, data: data[:-2] if name.endswith('/data/0') else data)
    with pytest.raises(ValueError, match=r'ViT-B-32\.pt \(\d+ bytes\) is not a readable CLIP '
                                         r'checkpoint: its record \S+/data/0 holds 14 bytes, not '
                                         r'the 4 torch\.float32 elements'):
        read_weights(path, 'CLIP checkpoint')


@pytest.mark.parametrize('kind', ['torch.save', 'torchscript'])
def test_a_damaged_tensor_record_is_refused_naming_it(tmp_path, kind):
    """torch.load and torch.jit.load check no CRC-32: the damage would load as other numbers."""
    path = tmp_path / 'ViT-B-32.pt'
    if kind == 'torch.save':
        torch.save(STATE, path)
    else:
        save_openai_torchscript(STATE, path, input_resolution=224, context_length=77,
                                vocab_size=9)
    record = damage_record(path, '/data/')
    with pytest.raises(ValueError, match=rf'{re.escape(str(path))}: truncated or corrupt CLIP '
                                         rf'checkpoint \(its record {re.escape(record)} is '
                                         r'damaged \(Bad CRC-32'):
        read_weights(path, 'CLIP checkpoint')


def test_truncated_foreign_and_pickled_files_are_refused_by_name(tmp_path):
    whole = tmp_path / 'whole.pt'
    torch.save(STATE, whole)
    truncated = tmp_path / 'ViT-B-32.pt'
    truncated.write_bytes(whole.read_bytes()[:200])
    with pytest.raises(ValueError, match=rf'{re.escape(str(truncated))} \(200 bytes\) is not a '
                                         r'readable CLIP checkpoint: .*download the file again'):
        read_weights(truncated, 'CLIP checkpoint')
    notes = tmp_path / 'notes.bin'
    notes.write_text('these are my notes, not weights\n')
    with pytest.raises(ValueError, match='notes.bin .* is not a readable checkpoint: neither a '
                                         'torch file nor safetensors'):
        read_weights(notes)
    broken = tmp_path / 'model.safetensors'
    save_file(STATE, str(broken))
    broken.write_bytes(broken.read_bytes()[:-8])
    with pytest.raises(ValueError, match='model.safetensors .* is not a readable checkpoint'):
        read_weights(broken)
    objects = tmp_path / 'objects.pt'
    torch.save({'state_dict': STATE, 'config': _Config()}, objects)
    with pytest.raises(ValueError, match='objects.pt pickles Python objects .* re-save'):
        read_weights(objects)
    tensor = tmp_path / 'tensor.pt'
    torch.save(torch.zeros(3), tensor)
    with pytest.raises(ValueError, match='tensor.pt is not a checkpoint: it holds a Tensor'):
        read_weights(tensor)
    with pytest.raises(FileNotFoundError, match='checkpoint .*absent.pt does not exist'):
        read_weights(tmp_path / 'absent.pt')


LFS_POINTER_TEXT = (b'version https://git-lfs.github.com/spec/v1\n'
                    b'oid sha256:4d7a3f0a2b9c5e1d8f6a7b3c2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f\n'
                    b'size 605247071\n')


@pytest.mark.parametrize('name', ['model.safetensors', 'pytorch_model.bin', 'ViT-B-32.pt'])
def test_a_git_lfs_pointer_is_told_as_one_in_every_format(tmp_path, name):
    """A Hugging Face repository cloned without Git LFS holds pointers under the weights'
    names; torch called one a file needing weights_only=False, safetensors a too large header."""
    (tmp_path / name).write_bytes(LFS_POINTER_TEXT)
    with pytest.raises(ValueError) as refused:
        read_weights(tmp_path, 'CLIP checkpoint', folder_files=[name])
    message = str(refused.value)
    assert message.startswith(f'{tmp_path / name} ({len(LFS_POINTER_TEXT)} bytes) is not a '
                              'readable CLIP checkpoint: it is a Git LFS pointer')
    assert "'git lfs pull'" in message


@pytest.mark.parametrize('start, reason', [
    (b'<!DOCTYPE html><html><body>Sign in', 'neither a torch file nor safetensors'),
    (bytes(range(256)), 'neither a torch file nor safetensors'), (b'', 'it is empty')],
    ids=['login-page', 'binary', 'empty'])
def test_a_file_of_another_kind_is_never_told_to_load_with_weights_only_false(tmp_path, start,
                                                                              reason):
    """torch's first line for any bytes its safe unpickler stops on says that
    weights_only=False "will likely succeed": advice to run an unknown file's pickle, and
    wrong for a login page saved under the weights' name."""
    path = tmp_path / 'pytorch_model.bin'
    path.write_bytes(start)
    with pytest.raises(ValueError) as refused:
        read_weights(path)
    assert str(refused.value) == (
        f'{path} ({len(start)} bytes) is not a readable checkpoint: {reason}. A truncated '
        'download or a file of another kind; download the file again')


def test_a_legacy_torch_file_pickling_objects_is_told_so(tmp_path):
    """torch.save's format before torch 1.6 (no zip archive) is a torch file too."""
    path = tmp_path / 'checkpoint.pth'
    torch.save({'state_dict': STATE, 'config': _Config()}, path,
               _use_new_zipfile_serialization=False)
    with pytest.raises(ValueError, match='checkpoint.pth pickles Python objects .* re-save'):
        read_weights(path)
    torch.save({'state_dict': STATE}, path, _use_new_zipfile_serialization=False)
    _assert_state(read_weights(path))


class _Config:
    """A pickled object that the safe loader refuses."""


def test_mismatch_lists_counts_first_keys_and_the_fix():
    expected = {f'block.{i}.weight': torch.empty(4, 4, device='meta') for i in range(8)}
    given = {f'block.{i}.weight': torch.zeros(4, 4) for i in range(1)}
    given['head.weight'] = torch.zeros(2)
    given['block.0.weight'] = torch.zeros(4, 2)
    with pytest.raises(WeightsMismatchError) as error:
        check_weights_fit(expected, given, 'ckpt.pt', 'the tower', 'Fix it.')
    assert str(error.value) == (
        'ckpt.pt does not fit the tower: 7 missing (block.1.weight, block.2.weight, '
        'block.3.weight, block.4.weight, block.5.weight and 2 more); 1 unexpected '
        '(head.weight); 1 with another shape (block.0.weight (file [4, 2], model [4, 4])). '
        'Fix it.')
    check_weights_fit(expected, {k: torch.zeros(4, 4) for k in expected}, 'a', 'b', 'c')


def test_a_module_prefix_is_dropped_only_when_every_key_has_it(tmp_path):
    """A model whose submodule is called ``module`` is no ``DataParallel`` save."""
    mixed = {'module.weight': torch.ones(2), 'head.bias': torch.zeros(1)}
    torch.save(mixed, tmp_path / 'weights.pt')
    assert set(read_weights(tmp_path / 'weights.pt')) == {'module.weight', 'head.bias'}


def test_five_keys_are_listed_whole_without_a_count_of_more():
    expected = {f'block.{i}.weight': torch.empty(1, device='meta') for i in range(5)}
    with pytest.raises(WeightsMismatchError) as error:
        check_weights_fit(expected, {}, 'ckpt.pt', 'the tower', 'Fix it.')
    assert str(error.value) == (
        'ckpt.pt does not fit the tower: 5 missing (block.0.weight, block.1.weight, '
        'block.2.weight, block.3.weight, block.4.weight). Fix it.')


def test_torchs_strict_load_refusal_is_told_as_a_mismatch():
    """The keys as the module was given them (after a loader's renaming), counted as
    check_weights_fit counts them: torch's own message, cut short, lost the unexpected ones
    behind a long list of missing keys."""
    module = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(4)))
    given = {'0.weight': torch.zeros(3, 2), 'visual.conv1.weight': torch.zeros(1)}
    with pytest.raises(RuntimeError) as refused:
        module.load_state_dict(given)
    error = strict_load_refusal(refused.value, 'vit.pth', 'the tower', 'Fix it.')
    assert str(error) == (
        'vit.pth does not fit the tower: 7 missing (0.bias, 1.bias, 1.weight, 2.bias, '
        '2.weight and 2 more); 1 unexpected (visual.conv1.weight); 1 with another shape '
        '(0.weight (file [3, 2], model [2, 2])). Fix it.')
    assert strict_load_refusal(RuntimeError('CUDA out of memory'), 'a', 'b', 'c') is None


@pytest.mark.parametrize('payload, entry', [
    ({**STATE, 'epoch': 3}, 'epoch'), ({**STATE, 7: torch.zeros(1)}, '7')],
    ids=['a-number-among-tensors', 'a-tensor-named-by-a-number'])
def test_a_file_holding_entries_other_than_tensors_by_name_is_refused_naming_one(
        tmp_path, payload, entry):
    """A checkpoint with training state beside its tensors (or keys that are no names) is no
    state dict: it is refused naming the file and the entry, not loaded as weights."""
    path = tmp_path / 'weights.pt'
    torch.save(payload, path)
    with pytest.raises(ValueError, match=rf'weights\.pt is not a checkpoint: 1 of its entries '
                                         rf'are not tensors by name \({entry}\)'):
        read_weights(path)


def test_a_tensor_named_model_is_a_weight_not_a_wrapper(tmp_path):
    """Only a mapping under 'model' (or 'state_dict') wraps the state dict: a tensor of that
    name is one of the weights."""
    path = tmp_path / 'weights.pt'
    torch.save({**STATE, 'model': torch.ones(2)}, path)
    loaded = read_weights(path)
    assert set(loaded) == {*STATE, 'model'}
    assert torch.equal(loaded['model'], torch.ones(2))


def test_a_whole_file_wins_over_its_shards_index_in_a_folder(tmp_path):
    """Hugging Face reads model.safetensors before model.safetensors.index.json."""
    save_file(STATE, str(tmp_path / 'model.safetensors'))
    (tmp_path / 'model.safetensors.index.json').write_text('{"weight_map": {}}')
    assert weights_file(tmp_path) == tmp_path / 'model.safetensors'
    _assert_state(read_weights(tmp_path))


def test_a_weight_map_that_is_no_mapping_is_refused_naming_the_index(tmp_path):
    index = tmp_path / 'model.safetensors.index.json'
    index.write_text('{"weight_map": ["model-00001-of-00001.safetensors"]}')
    with pytest.raises(ValueError, match=r'model\.safetensors\.index\.json is not the index of a '
                                         r'checkpoint saved in shards'):
        read_weights(index)


def test_a_mark_of_the_transformers_layout_counts_only_as_a_whole_name_part():
    """'context_model.' holds 'text_model.' but is no transformers name."""
    assert transformers_layout_key(['context_model.weight', 'myvision_model.bias']) is None


def test_a_damaged_record_of_a_bin_file_is_refused_as_well(tmp_path):
    """pytorch_model.bin is a torch.save zip archive too: its records' CRC-32 are checked."""
    path = tmp_path / 'pytorch_model.bin'
    torch.save(STATE, path)
    record = damage_record(path, '/data/')
    with pytest.raises(ValueError, match=rf'its record {re.escape(record)} is damaged'):
        read_weights(path)


def test_a_transposed_weight_of_as_many_elements_is_refused():
    """A [3, 2] file tensor for a [2, 3] parameter holds as many numbers but would load wrong:
    the shapes, not the counts, are compared."""
    expected = {'proj.weight': torch.empty(2, 3, device='meta')}
    with pytest.raises(WeightsMismatchError, match=r'1 with another shape \(proj\.weight '
                                                   r'\(file \[3, 2\], model \[2, 3\]\)\)'):
        check_weights_fit(expected, {'proj.weight': torch.zeros(3, 2)}, 'ckpt.pt', 'x', 'Fix.')


def test_nonfinite_keys_names_every_tensor_with_one_nan_or_inf_sorted():
    """One bad number is enough; integer tensors are never named; the keys come sorted."""
    state = {'z.weight': torch.tensor([1.0, float('inf')]),
             'a.bias': torch.tensor([float('nan'), 0.0]),
             'm.weight': torch.ones(3), 'steps': torch.tensor([7])}
    assert nonfinite_keys(state) == ['a.bias', 'z.weight']


def test_a_torchscript_record_longer_than_its_storage_is_refused(tmp_path):
    """Bytes beyond the elements data.pkl gives a record mean another file's record: refused,
    not read as the first elements."""
    path = tmp_path / 'ViT-B-32.pt'
    jit_save(path, nn.Linear(2, 2))
    _rewrite(path, lambda name, data: data + data[:4] if name.endswith('/data/0') else data)
    with pytest.raises(ValueError, match=r'its record \S+/data/0 holds 20 bytes, not the 4 '
                                         r'torch\.float32 elements'):
        read_weights(path, 'CLIP checkpoint')


def _rewrite_linear_code(path, change) -> None:
    """Rewrite the code record declaring ``Linear`` in the archive ``path`` through
    ``change(source)`` (``None`` leaves the record out). Its name varies: a class scripted
    before in this process is saved mangled, ``.../linear/___torch_mangle_N.py``."""
    def rewrite(name, data):
        if not (name.endswith('.py') and b'class Linear(Module):' in data):
            return data
        return None if (source := change(data.decode())) is None else source.encode()
    _rewrite(path, rewrite)


@pytest.mark.parametrize('change, message', [
    (lambda source: None,
     r'its code/ declares no class __torch__\.torch\.nn\.modules\.linear\.[\w.]*Linear, which '
     r'its data\.pkl holds \(0\.\)'),
    (lambda source: source.replace('  __parameters__ = ["weight", "bias", ]\n', ''),
     r'\S+/code/__torch__/torch/nn/modules/linear\S*\.py declares the module Linear without '
     r'its __parameters__'),
    (lambda source: source.replace('["weight", "bias", ]', '[0, 1, ]'),
     r'\S+/code/__torch__/torch/nn/modules/linear\S*\.py declares __parameters__ that are '
     r'not names'),
], ids=['class-missing', 'parameters-missing', 'parameters-not-names'])
def test_an_archive_whose_code_misdeclares_a_module_is_refused_naming_it(tmp_path, change,
                                                                         message):
    """The code/ records say which attributes of each module are weights: a module whose class
    is missing, or declared without its list of parameters, would have its weights skipped
    unseen, and a list of other than names would be looked up as something else."""
    path = tmp_path / 'ViT-B-32.pt'
    jit_save(path, nn.Sequential(nn.Linear(2, 2)))
    _rewrite_linear_code(path, change)
    with pytest.raises(ValueError, match=rf'ViT-B-32\.pt \(\d+ bytes\) is not a readable CLIP '
                                         rf'checkpoint: {message}'):
        read_weights(path, 'CLIP checkpoint')
