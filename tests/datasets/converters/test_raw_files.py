"""Reading raw caption files: line ends, final newlines, gzip, checks that name the file."""
from __future__ import annotations

import gzip
import re
import tracemalloc
from pathlib import Path

import pytest

from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.raw_files import (
    check_media_exist,
    parse_lang_paths,
    read_lines,
    require_same_length,
)


@pytest.mark.parametrize('raw', [
    b'eins\nzwei \n\xc5\xbelut\xc3\xbd\n',          # LF with final newline
    b'eins\r\nzwei \r\n\xc5\xbelut\xc3\xbd',         # CRLF without final newline
    b'\xef\xbb\xbfeins\nzwei \n\xc5\xbelut\xc3\xbd',  # BOM, no final newline
])
def test_line_ends_and_final_newline_do_not_change_captions(tmp_path, raw):
    path = tmp_path / 'captions.txt'
    path.write_bytes(raw)
    assert read_lines(path) == ['eins', 'zwei ', 'žlutý']


def test_gzip_is_read_transparently(tmp_path):
    path = tmp_path / 'train.cs.gz'
    with gzip.open(path, 'wb') as handle:
        handle.write('Muž v oranžovém klobouku.\nDívka.\n'.encode())
    assert read_lines(path) == ['Muž v oranžovém klobouku.', 'Dívka.']


def test_damage_inside_a_gzip_names_the_file(tmp_path):
    """Damaged deflate data raises zlib.error, which is no OSError: it escaped unnamed."""
    path = tmp_path / 'val.de.gz'
    with gzip.open(path, 'wb') as handle:
        handle.write(''.join(f'Ein Hund läuft über die Wiese {n}.\n' for n in range(2000))
                     .encode())
    raw = bytearray(path.read_bytes())
    raw[40:100] = bytes(60)
    path.write_bytes(bytes(raw))
    with pytest.raises(ConversionError, match=r'caption file .*val\.de\.gz cannot be read: '
                                              r'Error -3'):
        read_lines(path)


def test_blank_line_and_bad_encoding_name_file_and_line(tmp_path):
    path = tmp_path / 'de.txt'
    path.write_bytes(b'eins\n\nzwei\n')
    with pytest.raises(ConversionError, match=r'de\.txt has an empty line 2'):
        read_lines(path)
    path.write_bytes(b'eins\nzwei\n\xff\xfe\n')
    with pytest.raises(ConversionError, match=r'de\.txt is not UTF-8 \(invalid bytes on line 3\)'):
        read_lines(path)
    with pytest.raises(ConversionError, match=r'caption file not found: .*missing\.txt'):
        read_lines(tmp_path / 'missing.txt')


@pytest.mark.parametrize(('line', 'shown'), [
    ('\u200b', 'U+200B'), ('\ufeff \u200b', 'U+FEFF U+200B'), ('\u00ad', 'U+00AD'),
    ('\u200e\t', 'U+200E')])
def test_a_line_of_invisible_characters_alone_is_an_empty_line_of_its_file(tmp_path, line,
                                                                           shown):
    """A zero-width space (or mark, soft hyphen) alone, which a translation tool leaves for a
    line it cannot translate, passed the reader and was refused only as the annotation was
    written, naming its item (``item 1 ... translations['de'][0]``), not the file and line to
    repair. Expected: the empty-line error, naming the file, the line and what it holds."""
    path = tmp_path / 'de.txt'
    path.write_text(f'eins\n{line}\nzwei\n', encoding='utf-8')
    with pytest.raises(ConversionError,
                       match=rf'de\.txt has an empty line 2 \(only {re.escape(shown)}\)$'):
        read_lines(path)


def test_invisible_characters_beside_text_are_kept(tmp_path):
    """Multi30K's train.cs line 12811 and XTD10's French line 255 hold U+200B inside a caption:
    byte for byte, as every other character."""
    path = tmp_path / 'fr.txt'
    path.write_text('\u200bun chien\nsur \u200b\u200ble point\n', encoding='utf-8')
    assert read_lines(path) == ['\u200bun chien', 'sur \u200b\u200ble point']


def test_a_file_is_held_once_while_it_is_read(tmp_path):
    """The file's bytes and its decoded text were held beside the lines they were split into:
    a peak of twice the lines returned (CC3M's 3M translations of one language: ~0.8 GB)."""
    path = tmp_path / 'zh.txt'
    path.write_text(''.join(f'一只狗在草地上奔跑，旁边有一个孩子 {n}\n' for n in range(20000)),
                    encoding='utf-8')
    tracemalloc.start()
    try:
        lines = read_lines(path)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(lines) == 20000 and lines[-1] == '一只狗在草地上奔跑，旁边有一个孩子 19999'
    assert peak < 1.25 * held


def test_short_file_names_file_and_both_counts(tmp_path):
    reference = tmp_path / 'val.txt'
    short = tmp_path / 'val.cs'
    with pytest.raises(ConversionError) as info:
        require_same_length((reference, 3), {short: ['a', 'b']})
    assert str(short) in str(info.value) and str(reference) in str(info.value)
    assert 'has 2 lines' in str(info.value) and 'has 3' in str(info.value)


def test_missing_media_names_its_full_path(tmp_path):
    (tmp_path / 'val2014').mkdir()
    (tmp_path / 'val2014' / 'a.jpg').touch()
    check_media_exist(tmp_path, ['val2014/a.jpg'])
    with pytest.raises(ConversionError) as info:
        check_media_exist(tmp_path, ['val2014/a.jpg', 'val2014/b.jpg', 'train2014/c.jpg'])
    assert str(tmp_path / 'val2014' / 'b.jpg') in str(info.value)
    assert 'and 1 more' in str(info.value)


def test_a_missing_video_folder_names_the_videos_options(tmp_path):
    with pytest.raises(ConversionError, match=(
            f'^video folder not found: {tmp_path / "videos"}: check --videos-dir, or pass '
            '--skip-media-check to convert without the videos$')):
        check_media_exist(tmp_path / 'videos', ['video7030.mp4'], what='video')


def test_missing_media_in_decomposed_unicode_names_the_folders_spelling(tmp_path):
    import unicodedata

    decomposed = unicodedata.normalize('NFD', 'Ελληνικά.jpg')
    (tmp_path / decomposed).touch()
    with pytest.raises(ConversionError) as info:
        check_media_exist(tmp_path, [unicodedata.normalize('NFC', decomposed)])
    assert f'holds {decomposed!r}' in str(info.value)


def test_lang_path_options():
    assert {k: v.name for k, v in parse_lang_paths(['de=a/de.txt'], '--x').items()} == {
        'de': 'de.txt'}
    with pytest.raises(ConversionError, match='--x expects LANG=PATH'):
        parse_lang_paths(['de:a.txt'], '--x')
    with pytest.raises(ConversionError, match="names 'de' twice"):
        parse_lang_paths(['de=a', 'de=b'], '--x')


@pytest.mark.parametrize('name', ['../../escaped', '/x', '.hidden', 'a/b'])
def test_a_name_that_would_be_a_path_in_the_output_file_names_is_refused(name):
    """MSR-VTT's --train-list NAME=PATH writes msrvtt_train<NAME>.json: '/../../escaped' wrote
    outside --out-dir."""
    assert parse_lang_paths(['7k=a.csv', '9k.v2=b.csv'], '--train-list', key_name='NAME') == {
        '7k': Path('a.csv'), '9k.v2': Path('b.csv')}
    with pytest.raises(ConversionError, match=rf"--train-list: NAME '{re.escape(name)}' in"):
        parse_lang_paths([f'{name}=a.csv'], '--train-list', key_name='NAME')


def test_a_json_release_file_with_a_byte_order_mark_is_read(tmp_path):
    """A STAIR/Karpathy JSON re-saved by a Windows editor starts with a BOM, which json
    refuses; read_json drops it as read_lines does."""
    from xmr.datasets.converters.json_captions import read_json

    path = tmp_path / 'stair.json'
    path.write_bytes('\ufeff{"annotations": [{"image_id": 1, "caption": "犬"}]}'.encode())
    assert read_json(path, 'STAIR Captions file') == {
        'annotations': [{'image_id': 1, 'caption': '犬'}]}
