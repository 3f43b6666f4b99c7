"""container_problem: an empty or cut-short video told from its container's sizes alone."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from tests.datasets.test_media_files import LFS_POINTER_TEXT
from xmr.datasets.media_files import LFS_POINTER
from xmr.datasets.video_containers import container_problem, unlike_its_name


def write_clip(path, fourcc: str, frames: int = 5, width: int = 64):
    """A clip of ``frames`` frames 48 px high, in the container ``path``'s suffix names, written
    by OpenCV's FFmpeg (OpenCV is mmengine's dependency); noise, so that each frame's data
    differs in size."""
    cv2 = pytest.importorskip('cv2')
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), 10, (width, 48))
    noise = np.random.default_rng(0)
    for _ in range(frames):
        writer.write(noise.integers(0, 256, (48, width, 3), dtype=np.uint8))
    writer.release()
    assert path.stat().st_size > 0, f'OpenCV wrote no {path.name}'
    return path


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack('>I', 8 + len(payload)) + kind + payload


def _mp4(tmp_path, data: bytes):
    path = tmp_path / 'clip.mp4'
    path.write_bytes(data)
    return path


def test_whole_boxes_pass_and_a_box_past_the_end_is_a_cut_file(tmp_path):
    whole = _box(b'ftyp', b'isom') + _box(b'mdat', bytes(100)) + _box(b'moov', bytes(20))
    assert len(whole) == 12 + 108 + 28
    assert container_problem(_mp4(tmp_path, whole)) is None
    # Cut inside 'moov' (bytes 120..148): the file has 140.
    assert container_problem(_mp4(tmp_path, whole[:140])) == (
        "truncated: its 'moov' box ends at byte 148 but the file has 140 bytes (a copy or "
        'download cut short)')
    # Cut inside 'mdat' (bytes 12..120): the index at the end is gone too.
    assert container_problem(_mp4(tmp_path, whole[:60])).startswith(
        "truncated: its 'mdat' box ends at byte 120 but the file has 60 bytes")


def test_large_sizes_size_zero_and_a_missing_index(tmp_path):
    large = struct.pack('>I4sQ', 1, b'mdat', 16 + 40) + bytes(40)
    moov = _box(b'moov', bytes(4))
    assert container_problem(_mp4(tmp_path, _box(b'ftyp', b'') + large + moov)) is None
    # Size 0: the box runs to the end of the file, which is then never cut by the sizes.
    assert container_problem(_mp4(tmp_path, moov + struct.pack('>I4s', 0, b'mdat') + bytes(9))) \
        is None
    assert container_problem(_mp4(tmp_path, _box(b'ftyp', b'') + _box(b'mdat', bytes(8)))) == (
        "no 'moov' box, the index of the frames (a recording never finished?)")
    # A tail shorter than a box header is padding, not a box; so is a tail of zeros, which
    # read as a box of size 0 and no type made a playable file 'not an MP4'.
    for padding in (7, 8, 64):
        assert container_problem(_mp4(tmp_path, moov + bytes(padding))) is None
    assert container_problem(_mp4(tmp_path, _box(b'ftyp', b'') + bytes(64))) == (
        "no 'moov' box, the index of the frames (a recording never finished?)")
    assert container_problem(_mp4(tmp_path, moov + b'\x00\x00\x00\x02zz\x01\x02')) == (
        "not an MP4/QuickTime file: no box at byte 12 (size 2, type b'zz\\x01\\x02')")


@pytest.mark.parametrize('trailer', [b'trailer appended by a phone', b'\xff' * 12,
                                     _box(b'udta', bytes(40))[:20]])
def test_bytes_after_whole_frames_and_index_are_a_trailer_not_a_cut(tmp_path, trailer):
    """Phones and tools append data after the last box; decord and FFmpeg read every frame,
    where the walk read the trailer as a box running past the end ('truncated') or as no box
    at all ('not an MP4')."""
    whole = _box(b'ftyp', b'isom') + _box(b'moov', bytes(20)) + _box(b'mdat', bytes(100))
    assert container_problem(_mp4(tmp_path, whole + trailer)) is None
    # A box of frames cut short after them is still a cut file (a fragmented MP4's last part).
    assert container_problem(_mp4(tmp_path, whole + _box(b'moof', bytes(40))[:20])) == (
        "truncated: its 'moof' box ends at byte 196 but the file has 168 bytes (a copy or "
        'download cut short)')
    # Before the frames are whole, such bytes are no box.
    assert container_problem(_mp4(tmp_path, _box(b'moov', bytes(4)) + trailer)) is not None


def test_empty_files_and_unknown_containers(tmp_path):
    empty = tmp_path / 'empty.mp4'
    empty.write_bytes(b'')
    assert container_problem(empty) == 'the file is empty (0 bytes)'
    text = tmp_path / 'page.mp4'
    text.write_bytes(b'<html>404 not found</html>')
    assert container_problem(text) is None  # no known structure: the decoder decides
    with pytest.raises(FileNotFoundError):
        container_problem(tmp_path / 'absent.mp4')


def _ebml(ident: bytes, payload: bytes) -> bytes:
    # An 8-byte size (0x01 marks the length), as FFmpeg writes the segment's.
    return ident + (0x01 << 56 | len(payload)).to_bytes(8, 'big') + payload


@pytest.mark.parametrize('cut', [0, 1, 50])
def test_a_matroska_segment_must_end_inside_the_file(tmp_path, cut):
    header = _ebml(b'\x1a\x45\xdf\xa3', b'\x42\x82\x88matroska')
    data = header + _ebml(b'\x18\x53\x80\x67', _ebml(b'\xec', bytes(191)))  # a Void element
    path = tmp_path / 'clip.mkv'
    path.write_bytes(data[:len(data) - cut])
    expected = None if cut == 0 else (
        f'truncated: its Matroska segment ends at byte {len(data):,} but the file has '
        f'{len(data) - cut:,} bytes (a copy or download cut short)')
    assert len(data) == 12 + 11 + 12 + 200
    assert container_problem(path) == expected


def test_a_matroska_header_cut_short_and_segments_that_cannot_be_checked(tmp_path):
    header = _ebml(b'\x1a\x45\xdf\xa3', b'\x42\x82\x88matroska')
    path = tmp_path / 'clip.mkv'
    path.write_bytes(header + b'\x18\x53\x80\x67\x01\xff\xff\xff\xff\xff\xff\xff' + bytes(9))
    assert container_problem(path) is None  # a live recording's: nothing to compare
    path.write_bytes(header + b'\xec\x81\x00')  # a Void element before the segment
    assert container_problem(path) is None
    path.write_bytes(header[:15])
    assert container_problem(path) == 'truncated: the file ends inside its Matroska header'


def test_the_shared_clips_are_whole_and_their_cut_copies_are_not(shared_data, tmp_path):
    folder = shared_data / 'videos'
    names = ['flipping_a_pancake.mkv', 'bigbuckbunny.mp4', 'video_0.mov', 'unordered.mov']
    if not all((folder / name).is_file() for name in names):
        pytest.skip(f'video fixtures not found under {folder}')
    for name in names:
        assert container_problem(folder / name) is None
        data = (folder / name).read_bytes()
        cut = tmp_path / name
        for length in (len(data) // 2, len(data) - 1):
            cut.write_bytes(data[:length])
            assert container_problem(cut) is not None, (name, length)


def test_a_file_unlike_the_container_its_name_says(tmp_path):
    page = tmp_path / 'clip.MP4'
    page.write_bytes(b'<!DOCTYPE html><title>404</title>')
    assert unlike_its_name(page)
    other = tmp_path / 'clip.txt'
    other.write_bytes(page.read_bytes())
    assert not unlike_its_name(other)  # a name that says no video
    mkv = tmp_path / 'clip.webm'
    mkv.write_bytes(b'\x1a\x45\xdf\xa3' + bytes(12))
    assert not unlike_its_name(mkv)
    mov = tmp_path / 'clip.mov'
    mov.write_bytes(_box(b'wide', b'') + _box(b'mdat', b''))
    assert not unlike_its_name(mov)


def _track(handler: bytes, header: bytes = b'\x00' * 8) -> bytes:
    """A ``trak`` whose ``mdia/hdlr`` names ``handler`` after ``header`` (version, flags and
    ``pre_defined``; QuickTime puts its component type ``mhlr`` there)."""
    hdlr = _box(b'hdlr', header + handler + bytes(12) + b'\x00')
    return _box(b'trak', _box(b'tkhd', bytes(84)) + _box(b'mdia', _box(b'mdhd', bytes(24)) + hdlr))


@pytest.mark.parametrize(('tracks', 'sound_alone'), [
    ([b'soun'], True), ([b'soun', b'soun'], True), ([b'vide', b'soun'], False),
    ([b'soun', b'vide'], False),
    # A track of another handler may hold video FFmpeg finds by its codec; no track, no hdlr:
    # nothing told.
    ([b'soun', b'text'], False), ([], False)])
def test_an_index_of_sound_tracks_alone_is_a_file_without_video(tmp_path, tracks, sound_alone):
    """An audio-only MP4 (the sound stream of a clip, downloaded alone) passed the check before
    training and stopped the run when its batch came: 'decoding failed (Check failed: st_nb >=
    0 (-1381258232 vs. 0) ERROR cannot find video stream with wanted index: -1)'."""
    moov = _box(b'moov', _box(b'mvhd', bytes(100)) + b''.join(map(_track, tracks)))
    problem = container_problem(_mp4(tmp_path, _box(b'ftyp', b'isom') + moov
                                     + _box(b'mdat', bytes(50))))
    assert problem == ("no video track: its index ('moov') lists sound tracks alone (an "
                       'audio-only file, as a download of the sound stream alone gives)'
                       if sound_alone else None)


def test_quicktime_handlers_and_a_track_without_one(tmp_path):
    mov = tmp_path / 'clip.mov'
    mov.write_bytes(_box(b'moov', _track(b'soun', b'\x00' * 4 + b'mhlr')) + _box(b'mdat', b''))
    assert container_problem(mov).startswith('no video track')
    no_handler = _box(b'trak', _box(b'mdia', _box(b'mdhd', bytes(24))))
    mov.write_bytes(_box(b'moov', _track(b'soun') + no_handler) + _box(b'mdat', b''))
    assert container_problem(mov) is None
    # A handler box too short to name its type tells nothing either.
    short = _box(b'trak', _box(b'mdia', _box(b'hdlr', bytes(6))))
    mov.write_bytes(_box(b'moov', short) + _box(b'mdat', b''))
    assert container_problem(mov) is None


def audio_only_copy(source, target) -> None:
    """bigbuckbunny.mp4 (a video track, then a sound track) with its video track's box renamed
    ``free``, which readers skip: the sound alone, every size as it was."""
    data = bytearray(source.read_bytes())
    video_trak = 1_051_631  # moov's first trak: hdlr 'vide'
    assert data[video_trak + 4:video_trak + 8] == b'trak'
    data[video_trak + 4:video_trak + 8] = b'free'
    target.write_bytes(bytes(data))


def test_a_real_clip_without_its_video_track_is_told(shared_data, tmp_path):
    source = shared_data / 'videos' / 'bigbuckbunny.mp4'
    if not source.is_file():
        pytest.skip(f'{source} not found')
    assert container_problem(source) is None
    audio_only_copy(source, tmp_path / 'sound.mp4')
    assert container_problem(tmp_path / 'sound.mp4').startswith(
        "no video track: its index ('moov') lists sound tracks alone")


@pytest.mark.parametrize(('name', 'fourcc'), [
    ('clip.avi', 'MJPG'), ('clip.AVI', 'mp4v'), ('clip.flv', 'FLV1'), ('clip.wmv', 'WMV2'),
    ('clip.asf', 'WMV2'), ('clip.ts', 'mp4v'), ('clip.m2ts', 'mp4v'), ('clip.mkv', 'mp4v')])
def test_every_video_suffix_s_containers_are_told_from_a_page_under_their_name(tmp_path, name,
                                                                               fourcc):
    """A web page saved as 'clip.avi' (or .flv, .wmv, .ts, ...) was opened by nothing before
    training: only '.mp4'-like and '.mkv'-like names were read. Real files of each container,
    written by OpenCV's FFmpeg, begin as their names say."""
    path = write_clip(tmp_path / name, fourcc)
    assert not unlike_its_name(path)
    path.write_bytes(b'<!DOCTYPE html><title>404 Not Found</title>' + bytes(400))
    assert unlike_its_name(path)


@pytest.mark.parametrize('head', [
    b'OggS\x00\x02', b'\x00\x00\x01\xba\x44', b'\x00\x00\x01\xb3\x14',
    b'\x47' + bytes(187) + b'\x47', bytes(4) + b'\x47' + bytes(191) + b'\x47'])
def test_the_first_bytes_of_ogg_mpeg_and_transport_streams_begin_a_video(tmp_path, head):
    for suffix in ('.ogv', '.mpg', '.ts'):
        path = tmp_path / f'clip{suffix}'
        path.write_bytes(head + bytes(300))
        assert not unlike_its_name(path)


def test_a_git_lfs_pointer_under_a_video_s_name_is_told(tmp_path):
    """It was opened with decord, as a file unlike its name: 'decoding failed (Error
    reading ...)'."""
    path = _mp4(tmp_path, LFS_POINTER_TEXT)
    assert container_problem(path) == LFS_POINTER


def _matroska(*elements: bytes) -> bytes:
    """An EBML header, then a segment of ``elements``."""
    return (_ebml(b'\x1a\x45\xdf\xa3', b'\x42\x82\x88matroska')
            + _ebml(b'\x18\x53\x80\x67', b''.join(elements)))


def _track_entry(*track_types: int) -> bytes:
    """A Tracks element of one TrackEntry per type (1 video, 2 sound; 0: no TrackType)."""
    return _ebml(b'\x16\x54\xae\x6b', b''.join(
        _ebml(b'\xae', b'\xd7\x81\x01' + (bytes([0x83, 0x81, kind]) if kind else b''))
        for kind in track_types))


CLUSTER = _ebml(b'\x1f\x43\xb6\x75', bytes(30))


@pytest.mark.parametrize(('elements', 'sound_alone'), [
    ((_track_entry(2), CLUSTER), True), ((_ebml(b'\xec', bytes(9)), _track_entry(2, 2)), True),
    ((_track_entry(1, 2), CLUSTER), False), ((_track_entry(2, 0), CLUSTER), False),
    # A track list after the first cluster, or none: nothing told.
    ((CLUSTER, _track_entry(2)), False), ((CLUSTER,), False)])
def test_a_matroska_track_list_of_sound_alone_is_a_file_without_video(tmp_path, elements,
                                                                      sound_alone):
    """A WebM of a clip's sound alone read as 'decoding failed (Check failed: st_nb >= 0 ...
    cannot find video stream ...)' at its batch, after passing the check."""
    path = tmp_path / 'clip.webm'
    path.write_bytes(_matroska(*elements))
    assert container_problem(path) == (
        'no video track: its Matroska track list holds sound tracks alone (an audio-only file, '
        'as a download of the sound stream alone gives)' if sound_alone else None)


def test_a_real_matroska_clip_with_its_video_track_typed_sound_is_told(shared_data, tmp_path):
    source = shared_data / 'videos' / 'flipping_a_pancake.mkv'
    if not source.is_file():
        pytest.skip(f'{source} not found')
    data = bytearray(source.read_bytes())
    video_type = data.index(b'\x83\x81\x01')  # TrackType 1 of its first track, the video
    data[video_type + 2] = 2
    (tmp_path / 'sound.mkv').write_bytes(bytes(data))
    assert container_problem(tmp_path / 'sound.mkv').startswith(
        'no video track: its Matroska track list holds sound tracks alone')


@pytest.mark.parametrize(('elements', 'gap'), [
    # The segment's payload starts at byte 35; the track list is 27 bytes, a cluster 42.
    ((_track_entry(1), CLUSTER, bytes(40)), 35 + 27 + 42),
    ((_track_entry(1), bytes(4), CLUSTER), 35 + 27),
    # A cluster of unknown size (a live recording's) ends where its contents say: not walked on.
    ((_track_entry(1), b'\x1f\x43\xb6\x75\xff', bytes(40)), None),
    ((_track_entry(1), CLUSTER, _ebml(b'\xec', bytes(3))), None)])
def test_zeros_where_a_matroska_element_should_begin_are_damage(tmp_path, elements, gap):
    """A file a preallocating downloader never finished keeps its sizes, zeros from the cut on:
    the segment check passed it, and decord read the frames before the zeros as a shorter
    clip."""
    path = tmp_path / 'clip.mkv'
    path.write_bytes(_matroska(*elements))
    segment_end = 35 + sum(map(len, elements))
    assert container_problem(path) == (None if gap is None else (
        f'no Matroska element at byte {gap:,} of its segment (35..{segment_end:,}): the bytes '
        'there are zeros or damage, as a download written into a file of its full size and '
        'never finished leaves'))


@pytest.mark.parametrize('size', [0x40, 31])  # far past the segment's end, and one byte past
def test_an_element_running_past_its_segment_is_damage(tmp_path, size):
    data = bytearray(_matroska(_track_entry(1), CLUSTER))
    assert data[-31] == 30  # the last byte of the cluster's size
    data[-31] = size
    (tmp_path / 'clip.mkv').write_bytes(bytes(data))
    assert container_problem(tmp_path / 'clip.mkv').startswith(
        'no Matroska element at byte 62 of its segment')


def test_zeros_inside_a_cluster_are_found_by_walking_its_blocks(tmp_path):
    """A cluster of a right size, a time and a block, then zeros: its blocks are walked only
    when asked (a read per frame)."""
    blocks = _ebml(b'\xe7', b'\x00') + _ebml(b'\xa3', b'\x81\x00\x00\x80' + bytes(8))
    path = tmp_path / 'clip.mkv'
    path.write_bytes(_matroska(_track_entry(1), _ebml(b'\x1f\x43\xb6\x75', blocks + bytes(20))))
    assert container_problem(path) is None
    # The segment's payload starts at byte 35, the cluster's at 35 + 27 + 12; then 10 + 21
    # bytes of time and block.
    assert container_problem(path, blocks=True).startswith(
        f'no Matroska element at byte {35 + 27 + 12 + 31:,} of its segment')
    path.write_bytes(_matroska(_track_entry(1), _ebml(b'\x1f\x43\xb6\x75', blocks)))
    assert container_problem(path, blocks=True) is None


@pytest.mark.parametrize('first', [b'styp', b'sidx'])
def test_a_fragment_file_opening_with_a_segment_box_is_walked_for_a_cut(tmp_path, first):
    """A DASH/CMAF segment opens with ``styp`` or ``sidx`` instead of ``ftyp``; it was read as
    no known container, so one cut short inside its index passed without a word."""
    whole = _box(first, bytes(12)) + _box(b'moov', bytes(20)) + _box(b'mdat', bytes(40))
    assert container_problem(_mp4(tmp_path, whole)) is None
    # 'moov' spans bytes 20..48: cut at 40.
    assert container_problem(_mp4(tmp_path, whole[:40])) == (
        "truncated: its 'moov' box ends at byte 48 but the file has 40 bytes (a copy or "
        'download cut short)')
    assert not unlike_its_name(_mp4(tmp_path, whole))


@pytest.mark.parametrize(('name', 'head'), [
    # A GIF opens with 'G', a transport stream's sync byte, but has no second packet's.
    ('clip.ts', b'GIF89a' + bytes(300)),
    ('clip.m2ts', bytes(4) + b'G' + bytes(300)),
    # A WAV is a RIFF file too, of form 'WAVE', not 'AVI '.
    ('clip.avi', b'RIFF\x24\x08\x00\x00WAVEfmt ' + bytes(300))])
def test_a_file_that_shares_only_a_first_byte_or_riff_with_its_container_is_unlike_it(
        tmp_path, name, head):
    """One sync byte, or a RIFF header of another form, does not begin the container the name
    says: such a file is left to the decoder as one unlike its name."""
    path = tmp_path / name
    path.write_bytes(head)
    assert unlike_its_name(path)


def test_a_last_box_of_size_zero_and_a_large_size_index_are_read_as_boxes(tmp_path):
    """A size field of 0 (the box runs to the end of the file) is a box, not padding: only 8
    zero bytes are; and an index of 64-bit size has its payload after a 16-byte header."""
    to_the_end = _box(b'ftyp', b'isom') + struct.pack('>I4s', 0, b'moov') + bytes(20)
    assert container_problem(_mp4(tmp_path, to_the_end)) is None
    sound = _track(b'soun')
    large_moov = struct.pack('>I4sQ', 1, b'moov', 16 + len(sound)) + sound
    assert container_problem(_mp4(tmp_path, large_moov + _box(b'mdat', bytes(8)))).startswith(
        "no video track: its index ('moov') lists sound tracks alone")


def test_a_large_size_header_cut_before_its_64_bit_size_is_no_box(tmp_path):
    """Size 1 announces a 64-bit size; a file ending before it is no box, not a crash."""
    cut = _box(b'moov', bytes(4)) + b'\x00\x00\x00\x01mdat' + bytes(4)
    assert container_problem(_mp4(tmp_path, cut)) == (
        "not an MP4/QuickTime file: no box at byte 12 (size 1, type b'mdat')")


def test_a_box_smaller_than_its_own_header_is_no_box(tmp_path):
    """A size under 8 cannot hold the size and type it follows, whatever the type reads as."""
    data = _box(b'moov', bytes(4)) + b'\x00\x00\x00\x04free' + _box(b'mdat', bytes(8))
    assert container_problem(_mp4(tmp_path, data)) == (
        "not an MP4/QuickTime file: no box at byte 12 (size 4, type b'free')")


def test_the_first_index_is_the_one_read_when_a_file_holds_two(tmp_path):
    """FFmpeg skips a duplicated ``moov``; so does the sound-alone check, which reads the
    first: a sound-only first index is told, a video track in a second one changes nothing."""
    sound, video = (_box(b'moov', _track(handler)) for handler in (b'soun', b'vide'))
    problem = container_problem(_mp4(tmp_path, sound + video + _box(b'mdat', bytes(8))))
    assert problem.startswith("no video track: its index ('moov') lists sound tracks alone")
    assert container_problem(_mp4(tmp_path, video + sound + _box(b'mdat', bytes(8)))) is None


def test_a_track_running_past_its_index_is_not_read_from_the_bytes_after_it(tmp_path):
    """A child box is read only inside its parent: a ``trak`` whose size runs past the
    ``moov`` holding it tells nothing, even where the bytes after ``moov`` complete it."""
    trak = _track(b'soun')
    moov = struct.pack('>I4s', 8 + 100, b'moov') + trak[:100]
    data = _box(b'ftyp', b'isom') + _box(b'mdat', bytes(200)) + moov + trak[100:]
    assert len(trak) > 100
    assert container_problem(_mp4(tmp_path, data)) is None


def test_a_matroska_track_list_without_entries_tells_nothing(tmp_path):
    """No track entry is no sound track either: the decoder decides."""
    path = tmp_path / 'clip.webm'
    path.write_bytes(_matroska(_track_entry(), CLUSTER))
    assert container_problem(path) is None


def _riff(form: bytes, payload: bytes, size: int | None = None) -> bytes:
    payload = form + payload
    return b'RIFF' + struct.pack('<I', len(payload) if size is None else size) + payload


def _path(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(('data', 'problem'), [
    (_riff(b'AVI ', bytes(100)), None),
    # an odd chunk is padded to an even size before an OpenDML file's next chunk
    (_riff(b'AVI ', bytes(101)) + b'\x00' + _riff(b'AVIX', bytes(40)), None),
    (_riff(b'AVI ', bytes(100)) + b'a trailer', None),
    (_riff(b'AVI ', bytes(100), size=0xFFFFFFFF), None),  # FFmpeg's placeholder: unfinished
    (_riff(b'AVI ', bytes(100))[:60],
     "truncated: its AVI 'RIFF' chunk ends at byte 112 but the file has 60 bytes"),
    (_riff(b'AVI ', bytes(100)) + _riff(b'AVIX', bytes(40))[:20],
     "truncated: its AVI 'RIFF' chunk ends at byte 164 but the file has 132 bytes")])
def test_each_riff_chunk_of_an_avi_file_must_end_inside_it(tmp_path, data, problem):
    found = container_problem(_path(tmp_path, 'clip.avi', data))
    assert found == problem if problem is None else found.startswith(problem)


def _flv_tag(kind: int, data: bytes) -> bytes:
    return (bytes([kind]) + len(data).to_bytes(3, 'big') + bytes(7) + data
            + struct.pack('>I', 11 + len(data)))


FLV_HEADER = b'FLV\x01\x05' + struct.pack('>I', 9) + bytes(4)
FLV = FLV_HEADER + _flv_tag(18, bytes(30)) + _flv_tag(9, bytes(200)) + _flv_tag(8, bytes(50))


@pytest.mark.parametrize(('data', 'whole'), [
    (FLV, True), (FLV_HEADER, True), (FLV[:-1], False), (FLV[:-30], False),
    # cut where the sound tag begins, the video tag's size its end: no header tells that cut
    (FLV[:-65], True),
    (FLV[:-65 - 4], False), (FLV_HEADER[:10], False)])
def test_a_flash_video_must_end_with_a_whole_tag_and_its_size(tmp_path, data, whole):
    problem = container_problem(_path(tmp_path, 'clip.flv', data))
    assert problem is None if whole else problem.startswith('truncated: ')


@pytest.mark.parametrize(('lead', 'packet'), [(0, 188), (4, 192)])
def test_a_transport_stream_must_be_whole_packets(tmp_path, lead, packet):
    one = bytes(lead) + b'\x47' + bytes(packet - lead - 1)
    stream = one * 6
    assert container_problem(_path(tmp_path, 'clip.ts', stream)) is None
    assert container_problem(_path(tmp_path, 'clip.ts', stream[:-1])) == (
        f'truncated: its last {packet}-byte MPEG transport packet is not whole (the file has '
        f'{len(stream) - 1:,} bytes; a copy or download cut short)')
    damaged = stream[:-packet] + bytes(packet)  # whole packets, the last without its sync byte
    assert container_problem(_path(tmp_path, 'clip.ts', damaged)).startswith('truncated: ')


MPEG2_PACK = b'\x00\x00\x01\xba\x44' + bytes(8) + b'\x02' + bytes(2)  # 2 stuffing bytes
MPEG1_PACK = b'\x00\x00\x01\xba\x21' + bytes(7)


def _pes(code: int, payload: bytes) -> bytes:
    return b'\x00\x00\x01' + bytes([code]) + len(payload).to_bytes(2, 'big') + payload


@pytest.mark.parametrize('pack', [MPEG2_PACK, MPEG1_PACK])
def test_a_program_stream_s_packets_are_walked_for_a_cut_by_the_decode_check(tmp_path, pack):
    stream = pack + _pes(0xBB, bytes(12)) + _pes(0xE0, bytes(500)) + pack + _pes(0xC0, bytes(90))
    assert container_problem(_path(tmp_path, 'clip.mpg', stream), blocks=True) is None
    ended = stream + b'\x00\x00\x01\xb9' + b'after the end code'
    assert container_problem(_path(tmp_path, 'clip.mpg', ended), blocks=True) is None
    cut = _path(tmp_path, 'clip.mpg', stream[:-10])
    assert container_problem(cut) is None  # no size to tell it without the walk
    last = len(stream) - 96
    assert container_problem(cut, blocks=True) == (
        f'truncated: its MPEG packet at byte {last:,} ends at byte {len(stream):,} but the file '
        f'has {len(stream) - 10:,} bytes (a copy or download cut short)')
    cut_pack = _path(tmp_path, 'clip.mpg', stream[:len(stream) - 96 - len(pack) + 5])
    assert container_problem(cut_pack, blocks=True).startswith(
        f'truncated: its MPEG pack header at byte {len(stream) - 96 - len(pack):,}')


@pytest.mark.parametrize(('name', 'fourcc', 'blocks'), [
    ('clip.avi', 'MJPG', False), ('clip.avi', 'XVID', False), ('clip.flv', 'FLV1', False),
    ('clip.ts', 'mp4v', False), ('clip.m2ts', 'mp4v', False), ('clip.mpg', 'mpg2', True)])
def test_real_clips_cut_short_are_told_where_decord_reads_a_shorter_clip(tmp_path, name, fourcc,
                                                                       blocks):
    """Cut at half, each read as a shorter clip without an error, even decoding every frame:
    an MSVD-style AVI set's download stopped half way was used as its first half."""
    path = write_clip(tmp_path / name, fourcc, frames=40)
    assert container_problem(path, blocks) is None
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2 + 7])  # +7: not at a transport packet's boundary
    assert container_problem(path, blocks).startswith('truncated: ')
