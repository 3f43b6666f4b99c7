"""Atomic writes: the old file or the whole new one, never a partial file under the final name."""
from __future__ import annotations

import errno
import os
import pwd
import re
import time
from pathlib import Path

import pytest

import xmr.fileio
from xmr.fileio import (
    AtomicLocalBackend,
    atomic_write_bytes,
    atomic_write_text,
    atomic_write_texts,
    fsync_folder,
    input_written_over,
    process_running,
    remove_stale_temporaries,
    temporary_path,
)


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


@pytest.mark.parametrize('write', [lambda path: atomic_write_bytes(path, b'new'),
                                   lambda path: atomic_write_texts({path: 'new'})],
                         ids=['one file', 'a set'])
def test_on_a_read_only_file_system_the_error_is_the_writes_not_the_clean_up(
        tmp_path, monkeypatch, write):
    """There even the unlink of a temporary never made fails (EROFS): raised from the clean-up,
    it hid the error naming the file, and named a temporary file that never existed."""
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, 'Read-only file system')

    monkeypatch.setattr(xmr.fileio.os, 'fsync', read_only)
    monkeypatch.setattr(xmr.fileio.Path, 'unlink', read_only)
    with pytest.raises(OSError, match=r'report\.md: writing failed \(Read-only file system\)'):
        write(tmp_path / 'report.md')


def test_the_new_file_is_on_disk_before_it_replaces_the_old_and_the_replacement_after(
        tmp_path, monkeypatch):
    """A power cut after the write leaves the old file or the whole new one: the temporary's
    data are flushed before the rename, and the folder's entry after it."""
    events = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(descriptor: int) -> None:
        events.append(('fsync', os.readlink(f'/proc/self/fd/{descriptor}')))
        fsync(descriptor)

    def recording_replace(source, target) -> None:
        events.append(('replace', str(source), str(target)))
        replace(source, target)

    monkeypatch.setattr(xmr.fileio.os, 'fsync', recording_fsync)
    monkeypatch.setattr(xmr.fileio.os, 'replace', recording_replace)
    path = tmp_path / 'report.md'
    atomic_write_text(path, 'new\n')
    temporary = str(temporary_path(path))
    assert events == [('fsync', temporary), ('replace', temporary, str(path)),
                      ('fsync', str(tmp_path))]
    assert path.read_text() == 'new\n'


def test_an_exception_while_writing_replaces_nothing(tmp_path):
    path = tmp_path / 'a.bin'
    atomic_write_bytes(path, b'old')
    with pytest.raises(KeyboardInterrupt), xmr.fileio.atomic_open(path) as handle:
        handle.write(b'half')
        raise KeyboardInterrupt
    assert path.read_bytes() == b'old'
    assert [p.name for p in tmp_path.iterdir()] == ['a.bin']


def test_a_set_of_files_is_written_all_or_none(tmp_path, monkeypatch):
    old = {tmp_path / f'{name}.json': f'old {name}\n' for name in ('train', 'val', 'test')}
    atomic_write_texts(old)
    new = {path: f'new {path.stem}\n' for path in old}
    calls = []

    def full_at_the_third(descriptor: int) -> None:
        calls.append(descriptor)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(xmr.fileio.os, 'fsync', full_at_the_third)
    with pytest.raises(OSError, match=r'test\.json: writing failed \(No space left on device\); '
                       r'no file of this set was written or changed: free some space'):
        atomic_write_texts(new)
    assert {path: path.read_text() for path in old} == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ['test.json', 'train.json', 'val.json']
    monkeypatch.undo()

    (tmp_path / 'val.json').unlink()
    (tmp_path / 'val.json').mkdir()  # a folder where a file goes: refused before any write
    with pytest.raises(IsADirectoryError, match=r'val\.json: is a folder, not a file; nothing '):
        atomic_write_texts(new)
    assert (tmp_path / 'train.json').read_text() == 'old train\n'
    assert atomic_write_texts({tmp_path / 'train.json': 'x\n'}) == [tmp_path / 'train.json']


def test_a_text_written_as_it_is_made_is_whole_or_not_written(tmp_path):
    """A text given as its pieces (an annotation's lines, made as they are written) may fail
    part-way: the old file stays and no temporary is left."""
    path = tmp_path / 'train.json'
    atomic_write_texts({path: 'old\n'})
    assert atomic_write_texts({path: iter(['a', 'b\n'])}) == [path]
    assert path.read_text() == 'ab\n'

    def failing_pieces():
        yield 'half'
        raise ValueError('item 7 cannot be encoded')
    with pytest.raises(ValueError, match='item 7 cannot be encoded'):
        atomic_write_texts({path: failing_pieces()})
    assert path.read_text() == 'ab\n'
    assert [p.name for p in tmp_path.iterdir()] == ['train.json']


def test_the_mmengine_backend_writes_through_the_same_mechanism(tmp_path):
    backend = AtomicLocalBackend()
    backend.put(b'\x00\x01', tmp_path / 'sub' / 'x.pth')
    backend.put_text('ok', tmp_path / 'last_checkpoint')
    assert (tmp_path / 'sub' / 'x.pth').read_bytes() == b'\x00\x01'
    assert (tmp_path / 'last_checkpoint').read_text() == 'ok'


def test_stale_temporaries_of_dead_processes_are_removed_and_live_ones_kept(tmp_path):
    live = tmp_path / f'.a.json.{os.getpid()}.tmp'
    no_process = tmp_path / '.b.json.0.tmp'  # pid 0 is no process (os.kill would signal a group)
    dead = tmp_path / '.c.json.999999999.tmp'  # beyond any pid_max
    not_ours = tmp_path / 'notes.tmp'
    for path in (live, no_process, dead, not_ours):
        path.write_text('x')
    assert remove_stale_temporaries(tmp_path) == [no_process, dead]
    assert sorted(tmp_path.iterdir()) == [live, not_ours]
    assert remove_stale_temporaries(tmp_path / 'missing') == []


def test_a_set_of_files_written_where_a_killed_writer_left_temporaries_removes_them(tmp_path):
    """A converter killed as it wrote left 12.7 MB of .tmp files beside its outputs, which
    the rerun that wrote them whole left there."""
    (tmp_path / 'out').mkdir()
    killed = [tmp_path / 'out' / '.train.json.999999999.tmp', tmp_path / '.x.txt.999999998.tmp']
    live = tmp_path / 'out' / f'.val.json.{os.getpid()}.tmp'
    for path in (*killed, live):
        path.write_text('partial')
    atomic_write_texts({tmp_path / 'out' / 'train.json': '{}', tmp_path / 'y.txt': 'y'})
    assert sorted(path.name for path in tmp_path.rglob('*') if path.is_file()) == [
        f'.val.json.{os.getpid()}.tmp', 'train.json', 'y.txt']


def test_a_temporary_of_another_host_is_kept_until_it_has_gone_quiet(tmp_path, monkeypatch):
    """A test run on node B removed every .tmp whose PID no process of B had: node A's
    checkpoint, half written in the shared work dir, and A's training stopped."""
    monkeypatch.setattr(xmr.fileio.socket, 'gethostname', lambda: 'node-b.cluster')
    assert temporary_path(tmp_path / 'iter_6.pth').name == (
        f'.iter_6.pth.node-b_cluster-{os.getpid()}.tmp')
    writing = tmp_path / '.iter_6.pth.node-a_cluster-999999999.tmp'
    killed = tmp_path / '.iter_4.pth.node-a_cluster-999999998.tmp'
    own_dead = tmp_path / '.r.json.node-b_cluster-999999999.tmp'
    own_live = temporary_path(tmp_path / 'r.csv')
    for path in (writing, killed, own_dead, own_live):
        path.write_text('x')
    quiet = time.time() - xmr.fileio.OTHER_HOST_QUIET_SECONDS - 1
    os.utime(killed, (quiet, quiet))
    assert remove_stale_temporaries(tmp_path) == [killed, own_dead]
    assert sorted(tmp_path.iterdir()) == sorted([writing, own_live])


def test_a_process_of_another_user_counts_as_running(monkeypatch):
    def not_permitted(pid: int, signal: int) -> None:
        raise PermissionError(errno.EPERM, 'Operation not permitted')
    monkeypatch.setattr(xmr.fileio.os, 'kill', not_permitted)
    assert process_running(4242)


def test_the_backend_writes_text_in_the_encoding_asked(tmp_path):
    backend = AtomicLocalBackend()
    backend.put_text('Grüße', tmp_path / 'default.txt')
    backend.put_text('Grüße', tmp_path / 'latin.txt', encoding='latin-1')
    assert (tmp_path / 'default.txt').read_bytes() == b'Gr\xc3\xbc\xc3\x9fe'
    assert (tmp_path / 'latin.txt').read_bytes() == b'Gr\xfc\xdfe'


def test_a_rename_that_fails_part_way_leaves_no_temporary(tmp_path, monkeypatch):
    paths = [tmp_path / f'{name}.json' for name in ('train', 'val', 'test')]
    replace, calls = os.replace, []

    def fails_at_the_second(source, target) -> None:
        calls.append(target)
        if len(calls) == 2:
            raise OSError(errno.EACCES, 'Permission denied')
        replace(source, target)
    monkeypatch.setattr(xmr.fileio.os, 'replace', fails_at_the_second)
    with pytest.raises(OSError, match=r'val\.json: writing failed \(Permission denied\); 1 '
                       r'file\(s\) of this set replaced before it'):
        atomic_write_texts({path: 'new\n' for path in paths})
    assert sorted(p.name for p in tmp_path.iterdir()) == ['train.json']


def test_a_link_is_written_through_to_the_file_it_points_to(tmp_path):
    """A rename over the link made it a file of its own: a project's link to a shared
    annotation got the translations attached, and the shared file, which other configs read,
    kept its old text without a word."""
    shared = tmp_path / 'shared' / 'ann.json'
    shared.parent.mkdir()
    shared.write_text('old')
    (tmp_path / 'project').mkdir()
    for name in ('one.json', 'set.json'):
        (tmp_path / 'project' / name).symlink_to(shared)
    atomic_write_text(tmp_path / 'project' / 'one.json', 'new')
    assert (tmp_path / 'project' / 'one.json').is_symlink() and shared.read_text() == 'new'
    assert atomic_write_texts({tmp_path / 'project' / 'set.json': 'newer'}) == [
        tmp_path / 'project' / 'set.json']
    assert (tmp_path / 'project' / 'set.json').is_symlink() and shared.read_text() == 'newer'
    assert sorted(path.name for path in shared.parent.iterdir()) == ['ann.json']
    # A link and its file in one set are one file: refused before anything is written.
    with pytest.raises(ValueError, match=re.escape(
            f"{shared} and {tmp_path / 'project' / 'set.json'} are one file ({shared}); "
            'nothing of this set was written')):
        atomic_write_texts({tmp_path / 'project' / 'set.json': 'a', shared: 'b'})
    assert shared.read_text() == 'newer' and not list(shared.parent.glob('.*.tmp'))


def test_a_path_starting_with_a_tilde_is_refused_unless_such_a_folder_exists(tmp_path,
                                                                           monkeypatch):
    """Python does not expand '~': MediaIndex.save('~/gallery.idx') made a folder named '~'
    in the current one, and the index was not in the home folder."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"~/gallery.idx: starts with '~', which only a shell expands: give the folder "
            f"itself ({os.path.expanduser('~')})")):
        atomic_write_text('~/gallery.idx', 'index')
    user = pwd.getpwuid(os.getuid()).pw_name
    with pytest.raises(FileNotFoundError, match=f"~{user}/a.json: starts with '~{user}'"):
        atomic_write_texts({f'~{user}/a.json': 'text'})
    assert list(tmp_path.iterdir()) == []
    (tmp_path / '~').mkdir()  # a folder of that name, made on purpose
    atomic_write_text('~/gallery.idx', 'index')
    assert (tmp_path / '~' / 'gallery.idx').read_text() == 'index'
    # Names a shell passes as they are: a file, and a folder no user is named after.
    atomic_write_texts({'~draft.json': 'draft', '~no_such_user_xmr/a.json': 'a'})
    assert (tmp_path / '~draft.json').read_text() == 'draft'
    assert (tmp_path / '~no_such_user_xmr' / 'a.json').read_text() == 'a'


def test_an_output_that_is_an_input_under_another_name_is_found(tmp_path, monkeypatch):
    """A tool writing over its own input by a relative name or a link lost the input: the
    output must be matched to the file, not to its spelling."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'ckpt.pth').write_bytes(b'weights')
    (tmp_path / 'latest.pth').symlink_to(tmp_path / 'ckpt.pth')
    inputs = [None, 'other.pth', './ckpt.pth']
    assert input_written_over(tmp_path / 'ckpt.pth', inputs) == './ckpt.pth'
    assert input_written_over('latest.pth', inputs) == './ckpt.pth'
    assert input_written_over('sub/../ckpt.pth', [tmp_path / 'latest.pth']) == \
        tmp_path / 'latest.pth'
    assert input_written_over('out.pth', inputs) is None


def test_a_folder_is_flushed_file_by_file_then_itself(tmp_path, monkeypatch):
    """The files' data reach the disk before the folder's entries, which a rename of the
    folder then publishes; a file in a subfolder is not the folder's to flush."""
    (tmp_path / 'shard').mkdir()
    for name in ('a.npy', 'b.npy'):
        (tmp_path / 'shard' / name).write_bytes(b'x')
    (tmp_path / 'shard' / 'sub').mkdir()
    flushed = []
    monkeypatch.setattr(xmr.fileio, 'fsync_path', lambda path: flushed.append(Path(path)))
    fsync_folder(tmp_path / 'shard')
    assert sorted(flushed[:-1]) == [tmp_path / 'shard' / 'a.npy', tmp_path / 'shard' / 'b.npy']
    assert flushed[-1] == tmp_path / 'shard'


def test_a_set_s_folders_are_flushed_after_its_renames(tmp_path, monkeypatch):
    """As for one file: the renames of a set survive a power cut once each folder written
    into is flushed, after the last rename."""
    events = []
    replace = os.replace
    monkeypatch.setattr(xmr.fileio, 'fsync_path', lambda path: events.append(('fsync', path)))

    def recording_replace(source, target) -> None:
        events.append(('replace', Path(target)))
        replace(source, target)
    monkeypatch.setattr(xmr.fileio.os, 'replace', recording_replace)
    paths = [tmp_path / 'a' / 'train.json', tmp_path / 'b' / 'val.json']
    atomic_write_texts({path: 'text' for path in paths})
    assert events[:2] == [('replace', paths[0]), ('replace', paths[1])]
    assert sorted(Path(path) for _, path in events[2:]) == [tmp_path / 'a', tmp_path / 'b']


def test_a_file_named_like_a_user_s_home_is_written_as_named(tmp_path, monkeypatch):
    """Only a folder '~user' is what a shell expands: a file of that name is written as is."""
    monkeypatch.chdir(tmp_path)
    user = pwd.getpwuid(os.getuid()).pw_name
    atomic_write_text(f'~{user}', 'text')
    assert (tmp_path / f'~{user}').read_text() == 'text'


def test_a_temporary_folder_of_a_dead_process_is_not_taken_for_a_file(tmp_path):
    """A folder named like a temporary file is no file this sweep knows how to remove: it is
    left as it is, and the sweep goes on to the stale files beside it instead of failing."""
    folder = tmp_path / '.shard_0.999999999.tmp'
    folder.mkdir()
    (folder / 'a.npy').write_bytes(b'x')
    stale_file = tmp_path / '.b.json.999999999.tmp'
    stale_file.write_text('x')
    assert remove_stale_temporaries(tmp_path) == [stale_file]
    assert (folder / 'a.npy').read_bytes() == b'x'


def test_the_backend_s_failed_text_write_keeps_the_previous_file(tmp_path):
    """``last_checkpoint`` names the checkpoint a resume loads: a failed write must leave the
    previous name, not an empty file."""
    backend = AtomicLocalBackend()
    backend.put_text('epoch_1.pth', tmp_path / 'last_checkpoint')
    with pytest.raises(TypeError):
        backend.put_text(b'not text', tmp_path / 'last_checkpoint')
    assert (tmp_path / 'last_checkpoint').read_text() == 'epoch_1.pth'
    assert [p.name for p in tmp_path.iterdir()] == ['last_checkpoint']


def test_a_set_interrupted_as_its_text_is_made_leaves_no_temporary(tmp_path):
    """Ctrl-C while a converter makes its text is no ``Exception``: the temporaries written
    so far are removed all the same."""
    path = tmp_path / 'train.json'
    atomic_write_texts({path: 'old\n'})

    def interrupted_pieces():
        yield 'half'
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        atomic_write_texts({tmp_path / 'val.json': 'val\n', path: interrupted_pieces()})
    assert path.read_text() == 'old\n'
    assert [p.name for p in tmp_path.iterdir()] == ['train.json']
