"""read_checkpoint: every unreadable file is named with what is wrong with it."""
from __future__ import annotations

import argparse

import pytest
import torch
from mmengine.logging import HistoryBuffer

from xmr.engine.checkpoint import CheckpointReadError, read_checkpoint


def test_a_good_checkpoint_loads(tmp_path):
    torch.save({'state_dict': {'w': torch.arange(3)}}, tmp_path / 'ok.pth')
    assert torch.equal(read_checkpoint(tmp_path / 'ok.pth')['state_dict']['w'], torch.arange(3))


def test_a_truncated_checkpoint_names_the_file(tmp_path):
    torch.save({'state_dict': {'w': torch.zeros(1000)}}, tmp_path / 'full.pth')
    data = (tmp_path / 'full.pth').read_bytes()
    (tmp_path / 'cut.pth').write_bytes(data[:len(data) // 2])
    with pytest.raises(CheckpointReadError, match=f'{tmp_path / "cut.pth"}: truncated or corrupt '
                       r'checkpoint \(its zip archive has no central directory.*\): copy it again'):
        read_checkpoint(tmp_path / 'cut.pth')


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


def test_user_code_reads_a_checkpoint_with_numpy_logs_through_the_public_loader(tmp_path):
    """A plain weights-only load refuses MMEngine's numpy log buffers; xmr.apis' reader allows
    exactly those types (fresh interpreters: the allow-list is process-wide)."""
    import subprocess
    import sys

    import numpy as np

    path = tmp_path / 'run.pth'
    torch.save({'state_dict': {'w': torch.ones(2)},
                'message_hub': {'log': np.array([0.5, 0.25]), 'step': np.int64(7)}}, path)
    plain = subprocess.run([sys.executable, '-c', f'import torch; torch.load({str(path)!r}, '
                            'weights_only=True)'], capture_output=True, text=True)
    assert plain.returncode != 0 and 'weights_only' in plain.stderr
    script = ('from xmr.apis import read_checkpoint; '
              f'c = read_checkpoint({str(path)!r}); '
              "print(c['message_hub']['log'].tolist(), int(c['message_hub']['step']))")
    user = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True)
    assert user.returncode == 0, user.stderr
    assert user.stdout.split() == ['[0.5,', '0.25]', '7']


def test_state_dict_mismatches_lists_a_few_keys_of_each_kind_and_counts_all():
    from xmr.engine.checkpoint import state_dict_mismatches
    model = {name: torch.zeros(2) for name in 'abcde'}
    model['w'] = torch.zeros(4, 8)
    loaded = {'w': torch.zeros(4, 16), 'x': torch.zeros(1)}
    assert state_dict_mismatches(model, loaded) == [
        '1 keys of other shapes: w (checkpoint [4, 16], model [4, 8])',
        '5 keys missing from the checkpoint: a, b, c, ... (2 more)',
        '1 keys the model does not have: x']
    assert state_dict_mismatches(model, dict(model)) == []


def test_a_directory_given_as_checkpoint_is_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match=f'language module not found: {tmp_path}$'):
        read_checkpoint(tmp_path, what='language module')
