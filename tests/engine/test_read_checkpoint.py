"""read_checkpoint: every unreadable file is named with what is wrong with it."""
from __future__ import annotations

import argparse
import pickle
import re
import struct
import zipfile

import pytest
import torch
from mmengine.logging import HistoryBuffer

from tests.models.test_weight_files import jit_save
from tests.zip_records import damage_record
from xmr.engine.checkpoint import (
    CHECKPOINT_FIX,
    FACTS,
    CheckpointReadError,
    check_checkpoint,
    check_given_checkpoint,
    check_resumable,
    foreign_checkpoint_fix,
    keys_of_another_model,
    meta_records,
    read_checkpoint,
    refuse_unresumable,
    save_model_checkpoint,
    state_dict_mismatches,
)
from xmr.utils.cli import UserError
from xmr.version import provenance


def test_a_good_checkpoint_loads(tmp_path):
    torch.save({'state_dict': {'w': torch.arange(3)}}, tmp_path / 'ok.pth')
    assert torch.equal(read_checkpoint(tmp_path / 'ok.pth')['state_dict']['w'], torch.arange(3))


def test_a_checkpoint_written_outside_training_records_the_xmr_that_wrote_it(tmp_path):
    """A converted or merged model: the meta it is given, and the xmr, as training's has."""
    save_model_checkpoint(tmp_path / 'x.pth', {'w': torch.arange(3)}, {'method': 'dasd'})
    written = read_checkpoint(tmp_path / 'x.pth')
    assert written['meta'] == {'method': 'dasd', **provenance()}
    assert torch.equal(written['state_dict']['w'], torch.arange(3))


def test_a_truncated_checkpoint_names_the_file(tmp_path):
    torch.save({'state_dict': {'w': torch.zeros(1000)}}, tmp_path / 'full.pth')
    data = (tmp_path / 'full.pth').read_bytes()
    (tmp_path / 'cut.pth').write_bytes(data[:len(data) // 2])
    with pytest.raises(CheckpointReadError, match=f'{tmp_path / "cut.pth"}: truncated or corrupt '
                       r'checkpoint \(its zip archive has no central directory.*\): copy it again'):
        read_checkpoint(tmp_path / 'cut.pth')


def test_a_damaged_tensor_is_refused_naming_its_record(tmp_path):
    path = tmp_path / 'flipped.pth'
    torch.save({'state_dict': {'w': torch.ones(1000)}}, path)
    damage_record(path, 'data/0')
    for read in (read_checkpoint, check_checkpoint):
        with pytest.raises(CheckpointReadError, match=f'{path}: truncated or corrupt checkpoint '
                           r'\(its record flipped/data/0 is damaged \(Bad CRC-32'):
            read(path)


def test_a_checkpoint_saved_without_crcs_loads(tmp_path):
    path = tmp_path / 'no_crc.pth'
    torch.serialization.set_crc32_options(False)
    try:
        torch.save({'state_dict': {'w': torch.arange(5)}}, path)
    finally:
        torch.serialization.set_crc32_options(True)
    with zipfile.ZipFile(path) as archive:
        assert {info.CRC for info in archive.infolist()} == {0}
    assert torch.equal(read_checkpoint(path)['state_dict']['w'], torch.arange(5))


@pytest.mark.parametrize('content, found', [(b'', 'an empty file'),
                                            (b'epoch,loss\n1,0.5\n', 'neither a torch zip')])
def test_a_file_that_is_no_checkpoint_is_said_to_be_none(tmp_path, content, found):
    (tmp_path / 'x.pth').write_bytes(content)
    with pytest.raises(CheckpointReadError, match=f'x.pth: not a checkpoint: {found}'):
        read_checkpoint(tmp_path / 'x.pth')


def test_only_mmengine_objects_get_the_old_checkpoint_advice(tmp_path):
    torch.save({'buffer': HistoryBuffer()}, tmp_path / 'old.pth')
    with pytest.raises(CheckpointReadError, match=r'old.pth: checkpoint pickles objects .*'
                       r'HistoryBuffer\); it was probably written before .*weights_only=False'):
        read_checkpoint(tmp_path / 'old.pth')
    torch.save({'args': argparse.Namespace(lr=0.1)}, tmp_path / 'foreign.pth')
    with pytest.raises(CheckpointReadError) as error:
        read_checkpoint(tmp_path / 'foreign.pth', what='language module')
    assert 'foreign.pth: not an xmr language module: it pickles argparse.Namespace' in \
        str(error.value)
    assert 'weights_only=False' not in str(error.value)
    # The check of a checkpoint to resume from, before MMEngine's load fails on it with torch's
    # advice to trust the file, reads its pickle's names, not its tensors.
    with pytest.raises(CheckpointReadError, match='foreign.pth: not an xmr checkpoint: it pickles '
                       'argparse.Namespace that a weights-only load refuses'):
        check_checkpoint(tmp_path / 'foreign.pth')


@pytest.fixture
def fresh_allow_list(monkeypatch):
    """torch's weights-only allow-list as a fresh interpreter has it, before xmr adds the numpy
    types of its checkpoints (the list is process-wide); this process's own given back after."""
    from xmr.engine import checkpoint

    kept = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    monkeypatch.setattr(checkpoint, '_REGISTERED', False)
    yield
    torch.serialization.clear_safe_globals()
    torch.serialization.add_safe_globals(kept)


def numpy_logged_checkpoint(path):
    """A checkpoint whose message hub holds numpy values, as MMEngine's log buffers do."""
    import numpy as np

    torch.save({'state_dict': {'w': torch.ones(2)},
                'message_hub': {'log': np.array([0.5, 0.25]), 'step': np.int64(7)}}, path)
    return path


def assert_numpy_logs_read(checkpoint: dict) -> None:
    hub = checkpoint['message_hub']
    assert (hub['log'].tolist(), int(hub['step'])) == ([0.5, 0.25], 7)


def test_user_code_reads_a_checkpoint_with_numpy_logs_through_the_public_loader(
        tmp_path, fresh_allow_list):
    """A plain weights-only load refuses MMEngine's numpy log buffers; xmr.apis' reader allows
    exactly those types."""
    from xmr.apis import read_checkpoint as public_read_checkpoint

    path = numpy_logged_checkpoint(tmp_path / 'run.pth')
    with pytest.raises(pickle.UnpicklingError, match='weights_only'):
        torch.load(path, weights_only=True)
    assert_numpy_logs_read(public_read_checkpoint(path))


def test_state_dict_mismatches_lists_a_few_keys_of_each_kind_and_counts_all():
    model = {name: torch.zeros(2) for name in 'abcde'}
    model['w'] = torch.zeros(4, 8)
    loaded = {'w': torch.zeros(4, 16), 'x': torch.zeros(1)}
    assert state_dict_mismatches(model, loaded) == [
        '1 keys of other shapes: w (checkpoint [4, 16], model [4, 8])',
        '5 keys missing from the checkpoint: a, b, c and 2 more',
        '1 keys the model does not have: x']
    assert state_dict_mismatches(model, dict(model)) == []


def test_a_directory_given_as_checkpoint_is_refused_as_a_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=f'^language module is a folder, not a file: '
                                                f'{tmp_path}; give a .pth written by'):
        read_checkpoint(tmp_path, what='language module')
    with pytest.raises(FileNotFoundError, match=f'language module not found: {tmp_path / "x"}$'):
        read_checkpoint(tmp_path / 'x', what='language module')


def test_a_damage_in_any_record_is_refused_naming_that_record(tmp_path):
    """The first and the last record as much as the tensors' (the pickle, the version, ...)."""
    good, path = tmp_path / 'good.pth', tmp_path / 'damaged.pth'
    torch.save({'state_dict': {'w': torch.ones(1000)}}, good)
    with zipfile.ZipFile(good) as archive:
        names = [info.filename for info in archive.infolist()]
    assert len(names) > 2
    for name in names:
        path.write_bytes(good.read_bytes())
        damage_record(path, name)
        with pytest.raises(CheckpointReadError,
                           match=f'its record {name} is damaged \\(Bad CRC-32'):
            check_checkpoint(path)


def test_a_record_larger_than_one_read_is_checked_whole(tmp_path):
    """20 MiB of weights, more than one read of the check (16 MiB): the CRC-32 is compared
    once the record is read to its end."""
    path = tmp_path / 'large.pth'
    torch.save({'state_dict': {'w': torch.ones(5 << 20)}}, path)
    damage_record(path, 'data/0')
    with pytest.raises(CheckpointReadError,
                       match=r'its record large/data/0 is damaged \(Bad CRC-32'):
        check_checkpoint(path)


def test_an_empty_record_does_not_end_the_check_of_those_after_it(tmp_path):
    """An empty tensor's record has the CRC-32 0, like a record saved without one."""
    path = tmp_path / 'empty.pth'
    torch.save({'state_dict': {'a': torch.empty(0), 'w': torch.ones(1000)}}, path)
    with zipfile.ZipFile(path) as archive:
        assert archive.getinfo('empty/data/0').CRC == 0
    damage_record(path, 'data/1')
    with pytest.raises(CheckpointReadError,
                       match=r'its record empty/data/1 is damaged \(Bad CRC-32'):
        check_checkpoint(path)


def _damage_directory_entry(path, suffix, offset, layout, *values):
    """Write ``values`` (packed as ``layout``) at ``offset`` of the central directory entry of
    the record whose name ends in ``suffix``."""
    data = bytearray(path.read_bytes())
    entry = data.find(b'PK\x01\x02')
    while True:
        name_length, extra_length, comment_length = struct.unpack('<HHH',
                                                                  data[entry + 28:entry + 34])
        if data[entry + 46:entry + 46 + name_length].decode().endswith(suffix):
            break
        entry += 46 + name_length + extra_length + comment_length
    packed = struct.pack(layout, *values)
    data[entry + offset:entry + offset + len(packed)] = packed
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(('offset', 'layout', 'values'), [
    (10, '<H', (99,)),  # the compression method: one zipfile does not know
    (10, '<H', (12,)),  # the compression method: bzip2, which the stored bytes are not
    (10, '<H', (8,)),  # the compression method: deflate, which the stored bytes are not
    (8, '<H', (0x01,)),  # the flags: encrypted
    (8, '<H', (0x40,)),  # the flags: strongly encrypted
    (20, '<II', (10**6, 10**6)),  # the sizes: past the end of the file
])
def test_a_damaged_directory_entry_is_refused_naming_its_record(tmp_path, offset, layout,
                                                                values):
    """torch.load refused these (a RuntimeError read_checkpoint reports as corrupt); the check
    of the records must report them too, not raise zipfile's own error."""
    path = tmp_path / 'entry.pth'
    torch.save({'state_dict': {'w': torch.ones(1000)}}, path)
    _damage_directory_entry(path, 'data/0', offset, layout, *values)
    for read in (read_checkpoint, check_checkpoint):
        with pytest.raises(CheckpointReadError, match=f'{path}: truncated or corrupt checkpoint '
                           r'\(its record entry/data/0 is damaged \(.+\): the file changed'):
            read(path)


def test_a_legacy_pickle_checkpoint_loads(tmp_path):
    # torch.save(..., _use_new_zipfile_serialization=False): torch < 1.6's format.
    path = tmp_path / 'legacy.pth'
    torch.save({'state_dict': {'w': torch.arange(3)}}, path, _use_new_zipfile_serialization=False)
    assert torch.equal(read_checkpoint(path)['state_dict']['w'], torch.arange(3))
    # torch maps zip archives alone: a legacy file asked to be mapped is read.
    assert torch.equal(read_checkpoint(path, mmap=True)['state_dict']['w'], torch.arange(3))


def test_an_mmengine_checkpoint_gets_the_advice_once_its_buffer_class_is_allowed(tmp_path):
    """torch's refusal advises allow-listing HistoryBuffer; once it is, torch refuses the
    getattr a logged buffer's state unpickles through."""
    torch.save({'buffer': HistoryBuffer([0.5], [1])}, tmp_path / 'old.pth')
    with torch.serialization.safe_globals([HistoryBuffer]), pytest.raises(
            CheckpointReadError, match=r'old.pth: checkpoint pickles objects .*'
            r'\(builtins\.getattr\); it was probably written before xmr stored its logs as plain '
            'data, or by a run whose custom_hooks lacked WeightsOnlyCheckpointHook'):
        read_checkpoint(tmp_path / 'old.pth')


def test_as_many_mismatched_keys_as_shown_are_listed_with_no_more():
    model = {name: torch.zeros(2) for name in 'abc'}
    assert state_dict_mismatches(model, {}) == ['3 keys missing from the checkpoint: a, b, c']


@pytest.mark.parametrize('state, expected', [
    ({'module.a': 0}, None),  # DDP's prefix aside, the model's key a
    ({'a': 0, 'other': 0}, None),  # one of the model's keys is enough: a partial file
    ({}, "its keys: none; the model's: a, b, c"),
    ({'_extra_state': 0}, "its keys: _extra_state; the model's: a, b, c"),  # facts alone
    ({'visual.w': 0, 'text.w': 0, 'scale': 0, 'bias': 0},
     "its keys: visual.w, text.w, scale; the model's: a, b, c"),
])
def test_keys_of_another_model_names_three_of_each_unless_one_is_the_model_s(state, expected):
    # The model's facts (_extra_state) are no weight the file is expected to hold.
    assert keys_of_another_model(state, ['_extra_state', 'a', 'b', 'c', 'd']) == expected


@pytest.mark.parametrize('state, route', [
    # open_clip's epoch_N.pt: DDP's prefix, every weight of the CLIP under its own names
    ({'module.visual.w': 0, 'module.scale': 0, 'module.w': 0}, 'backbone.clip alone'),
    ({'visual.w': 0, 'w': 0}, 'tools/train.py wrote'),  # not all of it
    ({'visual.w': 0, 'scale': 0, 'w': 0, 'other': 0}, 'tools/train.py wrote'),  # and more
    ({'table.weight': 0}, 'tools/train.py wrote'),  # a part outside the backbone
    ({}, 'tools/train.py wrote'),
])
def test_a_foreign_checkpoint_holding_the_backbone_alone_is_sent_to_the_backbone(state, route):
    model = ['backbone.clip.visual.w', 'backbone.clip.scale', 'backbone.clip.w',
             'language_branch.embedding.table.weight', '_extra_state']
    fix = foreign_checkpoint_fix('ft.pt', state, model)
    assert route in fix
    assert ('model.backbone.pretrained=ft.pt' in fix) == (route == 'backbone.clip alone')


# numpy 2 warns of numpy.core, numpy 1 of nothing.
@pytest.mark.filterwarnings('ignore::DeprecationWarning')
def test_a_checkpoint_written_under_the_other_numpy_major_loads(tmp_path, fresh_allow_list):
    """A pickle names numpy's reconstructors by the writer's module: numpy 1's numpy.core, numpy
    2's numpy._core. The file is rewritten to name the other numpy's."""
    import numpy as np

    path = numpy_logged_checkpoint(tmp_path / 'run.pth')
    with zipfile.ZipFile(path) as archive:
        records = {info.filename: archive.read(info) for info in archive.infolist()}
    pickle_name = next(name for name in records if name.endswith('/data.pkl'))
    running, other = (('numpy._core', 'numpy.core') if int(np.__version__.split('.')[0]) >= 2
                      else ('numpy.core', 'numpy._core'))
    assert f'{running}.multiarray\n'.encode() in records[pickle_name]
    records[pickle_name] = records[pickle_name].replace(f'{running}.multiarray\n'.encode(),
                                                        f'{other}.multiarray\n'.encode())
    with zipfile.ZipFile(path, 'w') as archive:
        for name, data in records.items():
            archive.writestr(name, data)
    assert_numpy_logs_read(read_checkpoint(path))


def test_the_check_leaves_a_torchscript_archive_to_its_loader_and_names_a_foreign_zip(tmp_path):
    """OpenAI's CLIP releases are TorchScript archives, which the converters read on purpose:
    the check of a checkpoint's pickled objects passed torch's refusal of them up unnamed."""
    import numpy as np

    jit_save(tmp_path / 'ViT-B-32.pt', torch.nn.Linear(2, 2))
    check_checkpoint(tmp_path / 'ViT-B-32.pt')
    np.savez(tmp_path / 'feats.npz', x=np.zeros(2))
    with pytest.raises(CheckpointReadError, match=r'feats\.npz: not a checkpoint: a zip archive '
                       r'torch\.save did not write \(it holds no data\.pkl\); give a \.pth'):
        check_checkpoint(tmp_path / 'feats.npz')


def test_a_torchscript_archive_given_as_a_checkpoint_is_named_and_sent_to_the_backbone(tmp_path):
    """OpenAI's ViT-B-32.pt given as load_from or a tool's checkpoint: torch.load's refusal of
    a TorchScript archive was told as a truncated or corrupt file, to be copied again."""
    path = tmp_path / 'ViT-B-32.pt'
    jit_save(path, torch.nn.Linear(2, 2))
    route = (r"a TorchScript model archive \(the format of OpenAI's released CLIP weights, "
             r'ViT-B-32\.pt\), which holds the pretrained weights of a backbone, not a model xmr '
             r'trained; give it to the backbone: model\.backbone\.pretrained='
             rf'{re.escape(str(path))} with model\.backbone\.pretrained_cfg=openai')
    with pytest.raises(CheckpointReadError, match=rf'ViT-B-32\.pt: not an xmr checkpoint but '
                                                  rf'{route}.*image_pretrained.*; as the '
                                                  r'checkpoint, give a \.pth') as refused:
        read_checkpoint(path)
    assert 'corrupt' not in str(refused.value) and 'weights_only' not in str(refused.value)
    with pytest.raises(CheckpointReadError, match=rf'not an xmr checkpoint \(load_from\) but '
                                                  rf'{route}.*; as the checkpoint \(load_from\), '
                                                  r'give a \.pth written by tools/train\.py.*, or '
                                                  'load_from=None'):
        check_given_checkpoint(path, 'load_from', f'{CHECKPOINT_FIX}, or load_from=None')
    check_checkpoint(path)  # the converters read such archives on purpose


@pytest.mark.parametrize('dtype', ['float16', 'float32', 'float64', 'int8', 'int16', 'int32',
                                   'int64', 'uint8', 'uint32', 'uint64', 'bool'])
def test_a_numpy_array_of_each_allowed_dtype_loads(tmp_path, dtype):
    """Logged values and RNG states are numpy arrays of these dtypes (a flag array is bool,
    numpy's MT19937 key uint32): each must pass the weights-only load, values intact."""
    import numpy as np

    values = np.array([1, 0, 1], dtype=dtype)
    torch.save({'message_hub': {'values': values}}, tmp_path / 'run.pth')
    loaded = read_checkpoint(tmp_path / 'run.pth')['message_hub']['values']
    assert loaded.dtype == np.dtype(dtype) and loaded.tolist() == values.tolist()


def test_state_dict_mismatches_lists_as_many_keys_as_shown_and_never_the_facts_shapes():
    """The facts' length is their JSON's, compared by value elsewhere: facts of another length
    are no shape mismatch. ``shown`` bounds the keys listed, not the count."""
    model = {FACTS: torch.zeros(10), 'a': torch.zeros(2), 'b': torch.zeros(2),
             'c': torch.zeros(2)}
    loaded = {FACTS: torch.zeros(12), 'a': torch.zeros(2)}
    assert state_dict_mismatches(model, loaded) == ['2 keys missing from the checkpoint: b, c']
    assert state_dict_mismatches(model, {FACTS: torch.zeros(12)}, shown=1) == [
        '3 keys missing from the checkpoint: a and 2 more']


def test_a_checkpoint_written_from_a_copied_meta_records_the_xmr_writing_it(tmp_path):
    """A conversion copies the source's meta, which may name the xmr that wrote the source:
    the file records the running xmr, as training's checkpoints do (meta.update)."""
    stale = {key: f'old-{key}' for key in provenance()}
    save_model_checkpoint(tmp_path / 'x.pth', {'w': torch.arange(3)},
                          {'method': 'dasd', **stale})
    assert read_checkpoint(tmp_path / 'x.pth')['meta'] == {'method': 'dasd', **provenance()}


def test_a_file_of_a_weight_whose_name_only_ends_like_the_model_s_is_no_backbone_part():
    """``scale`` is no module's own name for ``backbone.clip.logit_scale`` (the name parts
    differ): the file goes through training, not to the backbone as ``backbone.clip.logit_``."""
    model = ['backbone.clip.logit_scale', 'backbone.clip.w', 'head.w']
    fix = foreign_checkpoint_fix('ft.pt', {'scale': 0}, model)
    assert 'tools/train.py wrote' in fix and 'pretrained=' not in fix


def test_a_legacy_pickle_cut_anywhere_is_named_corrupt(tmp_path):
    """A legacy file holds five pickles, then each storage's element count (8 bytes) and
    bytes: 48 bytes for one float32 tensor of 10. Cut inside its pickles, the check names it
    corrupt without loading (torch refused a global whose name was cut, ``coll.``, as a foreign
    object); cut inside its tensor's bytes, the load does."""
    whole = tmp_path / 'whole.pth'
    torch.save({'state_dict': {'w': torch.zeros(10)}}, whole,
               _use_new_zipfile_serialization=False)
    data, path = whole.read_bytes(), tmp_path / 'cut.pth'
    storage_starts = len(data) - (8 + 10 * 4)
    for cut in range(1, len(data)):
        path.write_bytes(data[:cut])
        reads = [check_checkpoint, read_checkpoint] if cut < storage_starts else [read_checkpoint]
        for read in reads:
            with pytest.raises(CheckpointReadError, match=f'{path}: truncated or corrupt '
                                                          r'checkpoint \(.+\): copy it again'):
                read(path)
    path.write_bytes(data[:storage_starts])
    check_checkpoint(path)


def test_a_legacy_pickle_s_refused_objects_are_named_by_module_and_name(tmp_path):
    """A legacy file is refused by torch.load itself, whose error names the global: a dotted
    name whole (argparse.Namespace), a builtin qualified (getattr, which MMEngine's logged
    buffers unpickle through, gets the advice for old xmr checkpoints)."""
    foreign, old = tmp_path / 'foreign.pth', tmp_path / 'old.pth'
    torch.save({'args': argparse.Namespace(lr=0.1)}, foreign,
               _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointReadError, match=f'{foreign}: not an xmr checkpoint: it pickles '
                                                  'argparse.Namespace that a weights-only'):
        read_checkpoint(foreign)
    torch.save({'buffer': HistoryBuffer([0.5], [1])}, old, _use_new_zipfile_serialization=False)
    with torch.serialization.safe_globals([HistoryBuffer]), pytest.raises(
            CheckpointReadError, match=rf'{old}: checkpoint pickles objects .*'
            r'\(builtins\.getattr\); it was probably written before xmr stored its logs'):
        read_checkpoint(old)


def test_a_damaged_pickle_under_good_crcs_is_named_corrupt_by_the_check(tmp_path):
    """A data.pkl whose bytes are no pickle, written with matching CRC-32s: the check of its
    pickled names reports the file corrupt instead of raising the unpickler's error."""
    path = tmp_path / 'bad.pth'
    with zipfile.ZipFile(path, 'w') as archive:
        archive.writestr('bad/data.pkl', b'\x80\x02garbage')
        archive.writestr('bad/version', b'3\n')
    with pytest.raises(CheckpointReadError, match=f'{path}: truncated or corrupt checkpoint'):
        check_checkpoint(path)


def test_a_missing_given_checkpoint_is_refused_naming_where_it_was_given(tmp_path):
    with pytest.raises(UserError, match=f'{tmp_path / "x.pth"} \\(--resume\\): no such file'):
        check_given_checkpoint(tmp_path / 'x.pth', '--resume')


RESUMABLE = {'state_dict': {'w': torch.zeros(1)}, 'message_hub': {},
             'meta': {'epoch': 0, 'iter': 4}}


@pytest.mark.parametrize('checkpoint, lacks', [
    ({key: value for key, value in RESUMABLE.items() if key != 'message_hub'}, 'message_hub'),
    ({**RESUMABLE, 'meta': {'iter': 4}}, 'meta.epoch'),
    ({**RESUMABLE, 'meta': {'epoch': 0}}, 'meta.iter'),
    ({key: value for key, value in RESUMABLE.items() if key != 'meta'}, 'meta.epoch, meta.iter'),
    ({'w': torch.zeros(1)}, 'state_dict, message_hub, meta.epoch, meta.iter'),  # bare weights
])
def test_a_checkpoint_lacking_any_entry_a_resume_reads_is_refused_naming_it(checkpoint, lacks):
    """MMEngine's resume reads the state dict, the message hub and meta's epoch and iter."""
    with pytest.raises(CheckpointReadError, match=f'^x.pth: not a checkpoint to resume from: it '
                                                  f'has no {lacks}, which'):
        refuse_unresumable(checkpoint, 'x.pth')
    refuse_unresumable(RESUMABLE, 'x.pth')


def test_check_resumable_reads_a_legacy_pickle_and_refuses_weights_alone(tmp_path):
    """torch maps zip archives alone: a legacy file is read whole."""
    torch.save(RESUMABLE, tmp_path / 'run.pth', _use_new_zipfile_serialization=False)
    check_resumable(tmp_path / 'run.pth')
    torch.save({'state_dict': {'w': torch.zeros(1)}}, tmp_path / 'weights.pth',
               _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointReadError, match='weights.pth: not a checkpoint to resume from'):
        check_resumable(tmp_path / 'weights.pth')


def test_meta_records_only_the_key_of_a_readable_checkpoint(tmp_path):
    """A tool's earlier output records its key in meta; another checkpoint, a missing file or a
    folder is none (no error: the tool then refuses to overwrite it)."""
    save_model_checkpoint(tmp_path / 'merged.pth', {'w': torch.zeros(1)},
                          {'language_modules': ['de']})
    assert meta_records(tmp_path / 'merged.pth', 'language_modules')
    assert not meta_records(tmp_path / 'merged.pth', 'converted_from')
    assert not meta_records(tmp_path / 'missing.pth', 'language_modules')
    assert not meta_records(tmp_path, 'language_modules')
