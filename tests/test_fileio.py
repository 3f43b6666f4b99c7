"""Atomic writes: the old file or the whole new one, never a partial file under the final name."""
from __future__ import annotations

import errno

import pytest

import xmr.fileio
from xmr.fileio import AtomicLocalBackend, atomic_write_bytes, atomic_write_text


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / 'report.md'
    atomic_write_text(path, 'old\n')

    def no_space(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(xmr.fileio.os, 'fsync', no_space)
    with pytest.raises(OSError, match=r'report\.md: writing failed \(No space left on device\); '
                       r'the previous file, if any, is unchanged: free some space') as error:
        atomic_write_bytes(path, b'new, but the disk is full')
    assert error.value.errno == errno.ENOSPC
    assert path.read_text() == 'old\n'
    assert [p.name for p in tmp_path.iterdir()] == ['report.md']


def test_an_exception_while_writing_replaces_nothing(tmp_path):
    path = tmp_path / 'a.bin'
    atomic_write_bytes(path, b'old')
    with pytest.raises(KeyboardInterrupt), xmr.fileio.atomic_open(path) as handle:
        handle.write(b'half')
        raise KeyboardInterrupt
    assert path.read_bytes() == b'old'
    assert [p.name for p in tmp_path.iterdir()] == ['a.bin']


def test_the_mmengine_backend_writes_through_the_same_mechanism(tmp_path):
    backend = AtomicLocalBackend()
    backend.put(b'\x00\x01', tmp_path / 'sub' / 'x.pth')
    backend.put_text('ok', tmp_path / 'last_checkpoint')
    assert (tmp_path / 'sub' / 'x.pth').read_bytes() == b'\x00\x01'
    assert (tmp_path / 'last_checkpoint').read_text() == 'ok'
