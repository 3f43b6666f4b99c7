"""Weight files of every released format read alike; unreadable or unfitting ones are named."""
from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors.torch import save_file

from tests.models.backbones.openai_clip_layout import save_openai_torchscript
from tests.zip_records import damage_record
from xmr.models.weight_files import (
    WeightsMismatchError,
    check_weights_fit,
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
        'block.3.weight, block.4.weight, block.5.weight, ... 2 more); 1 unexpected '
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
        'vit.pth does not fit the tower: 7 missing (0.bias, 1.weight, 1.bias, 2.weight, '
        '2.bias, ... 2 more); 1 unexpected (visual.conv1.weight); 1 with another shape '
        '(0.weight (file [3, 2], model [2, 2])). Fix it.')
    assert strict_load_refusal(RuntimeError('CUDA out of memory'), 'a', 'b', 'c') is None
