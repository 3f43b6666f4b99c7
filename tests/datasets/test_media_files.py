"""missing_media: the absent files of an annotation, in its order, one listing per folder."""
from __future__ import annotations

import os
import unicodedata

import pytest

from xmr.datasets import media_files
from xmr.datasets.media_files import (
    LFS_POINTER_HEAD,
    is_lfs_pointer,
    missing_media,
    other_spelling_hint,
    shown_path,
)

#: A Git LFS pointer as a clone without Git LFS leaves it under the file's name.
LFS_POINTER_TEXT = (b'version https://git-lfs.github.com/spec/v1\noid sha256:'
                    + b'4d7a2146' * 8 + b'\nsize 84213\n')


def test_the_missing_files_come_in_the_annotations_order_each_folder_listed_once(
        tmp_path, monkeypatch):
    for present in ('a/1.jpg', 'b/2.jpg', 'top.jpg'):
        (tmp_path / present).parent.mkdir(exist_ok=True)
        (tmp_path / present).write_bytes(b'')
    listed = []
    scandir = os.scandir

    def counting_scandir(path):
        listed.append(str(path))
        return scandir(path)

    monkeypatch.setattr(media_files.os, 'scandir', counting_scandir)
    paths = ['a/1.jpg', 'b/9.jpg', 'a/8.jpg', 'gone/7.jpg', 'top.jpg', 'b/2.jpg', 'lost.jpg',
             'a/6.jpg']
    assert missing_media(tmp_path, paths) == [tmp_path / 'b' / '9.jpg', tmp_path / 'a' / '8.jpg',
                                              tmp_path / 'gone' / '7.jpg', tmp_path / 'lost.jpg',
                                              tmp_path / 'a' / '6.jpg']
    assert sorted(listed) == sorted(str(tmp_path / folder) for folder in ('a', 'b', 'gone', ''))
    assert missing_media(tmp_path, iter(['a/1.jpg', 'top.jpg'])) == []


def test_a_file_where_a_folder_should_be_makes_its_paths_missing(tmp_path):
    # e.g. train2014 downloaded as an unextracted archive named like the folder
    (tmp_path / 'train2014').write_bytes(b'')
    assert missing_media(tmp_path, ['train2014/COCO_1.jpg']) == [
        tmp_path / 'train2014' / 'COCO_1.jpg']


def test_a_broken_link_or_a_folder_under_a_files_name_is_missing(tmp_path):
    # Listed under the name, neither can be read: found at its first read, either would stop
    # training at a random iteration, which the check before training exists to prevent.
    (tmp_path / 'real.jpg').write_bytes(b'')
    (tmp_path / 'linked.jpg').symlink_to(tmp_path / 'real.jpg')
    (tmp_path / 'broken.jpg').symlink_to(tmp_path / 'moved' / 'broken.jpg')
    (tmp_path / 'folder.jpg').mkdir()
    assert missing_media(tmp_path, ['real.jpg', 'linked.jpg', 'broken.jpg', 'folder.jpg']) == [
        tmp_path / 'broken.jpg', tmp_path / 'folder.jpg']


def test_a_file_the_folder_spells_in_another_unicode_form_is_named_with_that_spelling(tmp_path):
    """macOS and archives made there write file names decomposed (NFD): the composed (NFC)
    media_path of an annotation is then another name on Linux, missing though a listing shows
    it. Expected: still missing (it cannot be opened by that name), and the hint names the
    folder's own spelling and its form; none for a file that is simply absent."""
    decomposed = unicodedata.normalize('NFD', '고양이 café.jpg')
    (tmp_path / decomposed).write_bytes(b'')
    composed = tmp_path / unicodedata.normalize('NFC', decomposed)
    assert missing_media(tmp_path, [composed.name]) == [composed]
    hint = other_spelling_hint(composed)
    assert f'holds {decomposed!r}' in hint and 'Unicode NFD' in hint
    assert other_spelling_hint(tmp_path / 'absent.jpg') == ''
    assert other_spelling_hint(tmp_path / 'no folder' / 'absent.jpg') == ''


@pytest.mark.parametrize('written', ['a.jpg\r', 'a.jpg ', ' a.jpg', 'a.jpg\t'])
def test_a_file_named_without_the_whitespace_around_the_annotation_s_name_is_named(tmp_path,
                                                                                  written):
    """An annotation written from a list with Windows line endings keeps 'a.jpg\\r': the file
    was reported missing as '.../a.jpg', its carriage return unseen, with no hint, though the
    folder holds a.jpg."""
    (tmp_path / 'a.jpg').write_bytes(b'')
    [missing] = missing_media(tmp_path, [written])
    assert other_spelling_hint(missing) == (
        f" ({tmp_path} holds 'a.jpg', which the annotation names {written!r}, with whitespace "
        'around it (a line ending or a space a conversion left): strip each media_path)')
    assert shown_path(missing) == (repr(str(missing)) if written == 'a.jpg\r' or '\t' in written
                                   else str(missing))


def test_no_spelling_hint_for_a_path_under_a_file(tmp_path):
    """missing_media lists such a path missing; its hint must not fail the error it joins."""
    (tmp_path / 'a.jpg').write_bytes(b'')
    assert missing_media(tmp_path, ['a.jpg/b.jpg']) == [tmp_path / 'a.jpg' / 'b.jpg']
    assert other_spelling_hint(tmp_path / 'a.jpg' / 'b.jpg') == ''


def test_a_git_lfs_pointer_is_told_by_its_first_line_and_its_size():
    assert len(LFS_POINTER_TEXT) == 130
    assert is_lfs_pointer(LFS_POINTER_TEXT[:LFS_POINTER_HEAD], len(LFS_POINTER_TEXT))
    # A file of 1 KiB or more is no pointer, whatever it opens with; nor is other text.
    assert not is_lfs_pointer(LFS_POINTER_TEXT[:LFS_POINTER_HEAD], 1024)
    assert not is_lfs_pointer(b'version 2 of the clip', 100)
