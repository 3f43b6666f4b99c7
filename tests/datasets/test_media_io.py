"""Decoding images and the real clips of ../shared/data/videos with decord."""
from __future__ import annotations

import gc
import io
import re
import struct
import wave
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.datasets.test_media_files import LFS_POINTER_TEXT
from tests.datasets.test_video_containers import write_clip
from xmr.datasets.media_files import LFS_POINTER
from xmr.datasets.media_io import (
    MediaReadError,
    check_image_decodes,
    check_image_file,
    check_video_container,
    check_video_decodes,
    check_video_opens,
    read_image,
    read_video_frames,
)


@pytest.fixture
def videos(shared_data):
    folder = shared_data / 'videos'
    if not (folder / 'flipping_a_pancake.mkv').is_file():
        pytest.skip(f'video fixtures not found under {folder}')
    return folder


def test_test_sampling_decodes_the_segment_centres(videos):
    import decord

    frames, indices = read_video_frames(videos / 'flipping_a_pancake.mkv', 12,
                                        random_offset=False)
    assert indices == [12, 38, 64, 90, 116, 142, 167, 193, 219, 245, 271, 297]
    assert frames.dtype == torch.uint8 and tuple(frames.shape) == (12, 3, 240, 426)
    reader = decord.VideoReader(str(videos / 'flipping_a_pancake.mkv'))
    assert torch.equal(frames[5], torch.from_numpy(reader[142].asnumpy()).permute(2, 0, 1))


def test_frames_decode_alike_under_the_torch_bridge_other_code_set(videos):
    """decord.bridge.set_bridge('torch') (a user's module) made get_batch return torch tensors,
    which have no asnumpy(): every video read failed with an AttributeError naming no file."""
    import decord

    path = videos / 'flipping_a_pancake.mkv'
    expected, _ = read_video_frames(path, 4, random_offset=False)
    decord.bridge.set_bridge('torch')
    try:
        frames, _ = read_video_frames(path, 4, random_offset=False)
    finally:
        decord.bridge.set_bridge('native')
    assert torch.equal(frames, expected)


def test_sampled_h264_frames_equal_the_frames_decoded_in_sequence(videos):
    """bigbuckbunny.mp4 (H.264, 132 frames of 720 x 1280): 12 segments of 11 frames, centres
    5 + 11 i; frames reached by seeking must equal those reached by decoding from the start."""
    import decord

    frames, indices = read_video_frames(videos / 'bigbuckbunny.mp4', 12, random_offset=False)
    assert indices == [5 + 11 * i for i in range(12)]
    assert tuple(frames.shape) == (12, 3, 720, 1280)
    reader = decord.VideoReader(str(videos / 'bigbuckbunny.mp4'))
    in_sequence = {}
    for index in range(indices[-1] + 1):
        frame = reader.next()
        if index in indices:
            in_sequence[index] = torch.from_numpy(frame.asnumpy()).permute(2, 0, 1)
    assert all(torch.equal(frame, in_sequence[index]) for frame, index in zip(frames, indices))


@pytest.mark.parametrize('name', ['flipping_a_pancake.mkv', 'bigbuckbunny.mp4', 'video_0.mov',
                                  'unordered.mov'])
def test_sampled_frames_equal_another_reader_s_in_rgb_order(videos, name):
    """An independent reader (OpenCV's FFmpeg, read in sequence, BGR turned to RGB) gives the
    same pixels at the sampled indices: frame order, channel order and layout are right."""
    cv2 = pytest.importorskip('cv2')
    frames, indices = read_video_frames(videos / name, 12, random_offset=False)
    capture = cv2.VideoCapture(str(videos / name))
    in_sequence = []
    while len(in_sequence) <= indices[-1] and (read := capture.read())[0]:
        in_sequence.append(torch.from_numpy(read[1][..., ::-1].copy()).permute(2, 0, 1))
    capture.release()
    assert frames.dtype == torch.uint8 and frames.shape[:2] == (12, 3)
    assert all(torch.equal(frame, in_sequence[index]) for frame, index in zip(frames, indices))


def _mp4_boxes(data: bytes, start: int, end: int):
    """``(type, payload start, box end)`` of each MP4 box in ``data[start:end]``."""
    while start < end:
        size, kind = struct.unpack('>I4s', data[start:start + 8])
        yield kind, start + 8, start + size
        start += size


def _quarter_turned_copy(source: Path, target: Path) -> None:
    """``source`` with its video track's display matrix set to a quarter turn clockwise, as a
    phone records a portrait clip (ffmpeg's ``rotate=90``); the coded frames stay the same."""
    data = bytearray(source.read_bytes())
    [(moov, moov_end)] = [(b, e) for kind, b, e in _mp4_boxes(data, 0, len(data))
                          if kind == b'moov']
    for kind, trak, trak_end in _mp4_boxes(data, moov, moov_end):
        for inner, tkhd, _ in (_mp4_boxes(data, trak, trak_end) if kind == b'trak' else ()):
            # After version/flags, times, ids and duration (v0: 20 bytes, v1: 32), reserved 8,
            # layer, group, volume, reserved 2 each: the 3 x 3 matrix, then width and height.
            matrix = tkhd + 4 + (32 if data[tkhd] == 1 else 20) + 16
            if inner == b'tkhd' and struct.unpack('>I', data[matrix + 36:matrix + 40])[0]:
                data[matrix:matrix + 36] = struct.pack('>9i', 0, 1 << 16, 0, -(1 << 16), 0, 0,
                                                       0, 0, 1 << 30)
    target.write_bytes(bytes(data))


def test_a_rotated_video_decodes_upright_as_players_show_it(videos, tmp_path):
    """decord applies the display matrix (docs/data.md): a portrait clip is not fed sideways."""
    _quarter_turned_copy(videos / 'bigbuckbunny.mp4', tmp_path / 'portrait.mp4')
    upright, _ = read_video_frames(videos / 'bigbuckbunny.mp4', 3, random_offset=False)
    turned, _ = read_video_frames(tmp_path / 'portrait.mp4', 3, random_offset=False)
    assert tuple(turned.shape) == (3, 3, 1280, 720)
    assert torch.equal(turned, torch.rot90(upright, k=-1, dims=(2, 3)))


def _vint(data: bytes, at: int) -> tuple[int, int]:
    """The EBML variable-length number at ``data[at:]`` without its length marker, and the
    offset after it."""
    length = 9 - data[at].bit_length()
    return int.from_bytes(data[at:at + length], 'big') & ((1 << 7 * length) - 1), at + length


def _variable_rate_copy(source: Path, target: Path) -> None:
    """``source`` (a Matroska clip at 30 fps) with each block's time ``t`` ms moved to
    ``t + 15`` in every odd 33 ms slot: frames 18 to 48 ms apart, in the same order."""
    data = bytearray(source.read_bytes())
    at = data.index(b'\x1f\x43\xb6\x75')  # the first cluster
    while at < len(data) and data[at:at + 4] == b'\x1f\x43\xb6\x75':
        size, start = _vint(data, at + 4)
        block = start
        while block < start + size:
            ident = data[block]  # a cluster's children here have 1-byte ids
            length, payload = _vint(data, block + 1)
            if ident == 0xA3:  # SimpleBlock: track number, then a signed 16-bit time
                _, time_at = _vint(data, payload)
                time = int.from_bytes(data[time_at:time_at + 2], 'big', signed=True)
                data[time_at:time_at + 2] = (time + 15 * (time // 33 % 2)).to_bytes(2, 'big')
            block = payload + length
        at = start + size
    target.write_bytes(bytes(data))


def test_a_variable_frame_rate_clip_gives_the_frames_of_its_indices(videos, tmp_path):
    """Frames reached by seeking a clip whose frames are 18 to 48 ms apart equal those
    decoded in sequence, and those of the constant-rate clip it was made from: sampling is by
    frame index, whatever the times."""
    import decord

    _variable_rate_copy(videos / 'flipping_a_pancake.mkv', tmp_path / 'vfr.mkv')
    reader = decord.VideoReader(str(tmp_path / 'vfr.mkv'))
    starts = np.array([reader.get_frame_timestamp(i)[0] for i in range(len(reader))])
    gaps = np.diff(starts)
    assert len(reader) == 310 and gaps.min() < 0.02 and gaps.max() > 0.045
    frames, indices = read_video_frames(tmp_path / 'vfr.mkv', 12, random_offset=False)
    assert indices == [12, 38, 64, 90, 116, 142, 167, 193, 219, 245, 271, 297]
    in_sequence = [torch.from_numpy(reader.next().asnumpy()) for _ in range(298)]
    constant, _ = read_video_frames(videos / 'flipping_a_pancake.mkv', 12, random_offset=False)
    assert all(torch.equal(frame, in_sequence[index].permute(2, 0, 1))
               for frame, index in zip(frames, indices))
    assert torch.equal(frames, constant)


def test_train_sampling_draws_one_frame_per_segment(videos):
    torch.manual_seed(0)
    seen = set()
    for _ in range(5):
        frames, indices = read_video_frames(videos / 'flipping_a_pancake.mkv', 12, True)
        assert frames.shape[0] == 12
        assert all(i * 310 // 12 <= index < -(-(i + 1) * 310 // 12)
                   for i, index in enumerate(indices))
        seen.add(tuple(indices))
    assert len(seen) > 1


def test_out_of_order_timestamps_still_give_every_frame(videos):
    frames, indices = read_video_frames(videos / 'unordered.mov', 12, random_offset=False)
    assert indices == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert tuple(frames.shape) == (12, 3, 50, 50)
    _, train_indices = read_video_frames(videos / 'unordered.mov', 8, random_offset=True)
    assert train_indices == [0, 0, 1, 1, 2, 2, 3, 3]


def test_corrupted_and_missing_videos_name_the_file(videos, tmp_path):
    with pytest.raises(MediaReadError, match=r'corrupted\.mp4: decoding failed') as info:
        read_video_frames(videos / 'corrupted.mp4', 12, random_offset=False)
    assert info.value.path == str(videos / 'corrupted.mp4')
    with pytest.raises(MediaReadError, match=r'nothing\.mp4: file not found'):
        read_video_frames(tmp_path / 'nothing.mp4', 12, random_offset=False)


@pytest.mark.parametrize('num_frames', [0, 8.0])
def test_a_bad_frame_count_is_the_caller_s_error_not_the_file_s(videos, num_frames):
    # Raised inside the decoding, it was a MediaReadError blaming a sound file ("replace the
    # file"), which on_corrupt='skip' took as a reason to skip every video.
    with pytest.raises(ValueError, match=rf'num_frames must be a positive int, got {num_frames}'):
        read_video_frames(videos / 'video_0.mov', num_frames, random_offset=False)


@pytest.mark.parametrize('num_threads', [None, '2', 1.5, -1])
def test_a_bad_thread_count_is_the_caller_s_error_not_the_file_s(videos, num_threads):
    # decord refused it when opening the file ("expected int but get NULL"), which read as a
    # damaged file to replace, and on_corrupt='skip' skipped every video for it.
    with pytest.raises(ValueError, match='num_threads must be an int >= 0'):
        read_video_frames(videos / 'video_0.mov', 4, random_offset=False, num_threads=num_threads)


def test_a_decoding_failure_gives_decord_s_reason_on_one_line_without_its_source_location(
        videos):
    # decord's message reads "[hh:mm:ss] /src/.../threaded_decoder.cc:NNN: Check failed: ...",
    # spread over lines; the log and the skip warning keep only the reason.
    with pytest.raises(MediaReadError) as info:
        read_video_frames(videos / 'corrupted.mp4', 12, random_offset=False)
    assert info.value.reason.startswith('decoding failed (Check failed')
    assert '\n' not in info.value.reason and '.cc:' not in info.value.reason


def test_a_file_without_a_video_stream_says_so(tmp_path):
    """A sound file under a video's name read as 'decoding failed (Check failed: st_nb >= 0
    (-1381258232 vs. 0) ERROR cannot find video stream with wanted index: -1)'."""
    with wave.open(str(tmp_path / 'clip.wav'), 'wb') as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(8000)
        sound.writeframes(bytes(16000))
    with pytest.raises(MediaReadError) as info:
        read_video_frames(tmp_path / 'clip.wav', 12, random_offset=False)
    assert info.value.reason == ('no video stream: FFmpeg opens the file but finds no video in '
                                 'it (an audio-only file, as a download of the sound stream '
                                 'alone gives)')


def test_a_video_without_frames_says_so(monkeypatch, tmp_path):
    import decord

    class EmptyVideo:
        def __init__(self, *args, **kwargs):
            pass

        def __len__(self):
            return 0

    (tmp_path / 'empty.mp4').write_bytes(b'?')  # no container whose sizes could tell
    monkeypatch.setattr(decord, 'VideoReader', EmptyVideo)
    with pytest.raises(MediaReadError, match=r'empty\.mp4: the video has no frames'):
        read_video_frames(tmp_path / 'empty.mp4', 12, random_offset=False)


def test_a_kept_decoding_error_holds_no_video_reader(videos):
    """decord's exception holds its reader (and the decoder's threads) in its traceback: an
    error chained to it and kept would keep the reader for the garbage collector, which a
    DataLoader worker forked meanwhile runs on a reader without threads, and aborts."""
    import decord

    gc.collect()
    gc.disable()
    try:
        with pytest.raises(MediaReadError) as kept:
            read_video_frames(videos / 'corrupted.mp4', 4, random_offset=False)
        alive = [o for o in gc.get_objects() if type(o) is decord.VideoReader]
    finally:
        gc.enable()
    assert kept.value.__cause__ is None and kept.value.__context__ is None
    assert alive == []


def test_images_decode_as_rgb_and_bad_files_name_their_path(tmp_path):
    pixels = np.arange(8 * 6 * 3, dtype=np.uint8).reshape(8, 6, 3)
    Image.fromarray(pixels).save(tmp_path / 'a.png')
    Image.fromarray(pixels[..., 0]).save(tmp_path / 'gray.png')
    assert torch.equal(read_image(tmp_path / 'a.png'), torch.from_numpy(pixels).permute(2, 0, 1))
    gray = read_image(tmp_path / 'gray.png')
    assert gray.shape == (3, 8, 6) and torch.equal(gray[0], gray[2])
    (tmp_path / 'broken.jpg').write_bytes(b'not a jpeg')
    with pytest.raises(MediaReadError, match=r'broken\.jpg: not a decodable image'):
        read_image(tmp_path / 'broken.jpg')
    with pytest.raises(MediaReadError, match=r'gone\.jpg: file not found'):
        read_image(tmp_path / 'gone.jpg')


def test_a_palette_image_with_transparency_reads_its_colours_without_a_warning(tmp_path):
    """Pillow warned of such a file (common in scraped galleries) in every DataLoader worker,
    naming none."""
    import warnings

    palette = [value for colour in [(200, 10, 10), (10, 200, 10), (10, 10, 200)]
               for value in colour]
    image = Image.fromarray(np.array([[0, 1, 2], [2, 1, 0]], dtype=np.uint8), mode='P')
    image.putpalette(palette)
    image.save(tmp_path / 'logo.png', transparency=b'\x00\xff\x80')
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        read = read_image(tmp_path / 'logo.png')
    expected = np.array(palette, dtype=np.uint8).reshape(3, 3)[[[0, 1, 2], [2, 1, 0]]]
    assert torch.equal(read, torch.from_numpy(expected).permute(2, 0, 1))


def test_a_16_bit_grey_image_reads_as_its_top_8_bits_and_32_bit_samples_are_refused(
        tmp_path):
    """Pillow's RGB conversion clips 16-bit samples at 255 (every scan a white picture) and
    32-bit ones alike; a 32-bit image beyond 16 bits, or of floats, has no known range of grey.
    Pillow opens a 16-bit PGM (and, before 10.3, a 16-bit PNG) in its 32-bit mode 'I'."""
    samples = np.array([[0, 255, 256, 4660], [32768, 40000, 65280, 65535]], dtype=np.uint16)
    Image.fromarray(samples).save(tmp_path / 'scan.png')
    Image.fromarray(samples).save(tmp_path / 'scan.tif')
    header = b'P5\n4 2\n65535\n'
    (tmp_path / 'scan.pgm').write_bytes(header + samples.astype('>u2').tobytes())
    expected = torch.tensor([[0, 0, 1, 18], [128, 156, 255, 255]], dtype=torch.uint8)
    for name, mode in (('scan.png', 'I;16'), ('scan.tif', 'I;16'), ('scan.pgm', 'I')):
        assert Image.open(tmp_path / name).mode == mode
        assert torch.equal(read_image(tmp_path / name), expected.expand(3, 2, 4)), name
        check_image_decodes(tmp_path / name)
    Image.fromarray(samples.astype(np.int32) * 2).save(tmp_path / 'wide.tif')
    Image.fromarray(samples.astype(np.float32) / 65535).save(tmp_path / 'depth.tif')
    for name, kind in (('wide.tif', "integer samples (mode 'I', values 0..131070)"),
                       ('depth.tif', "floating-point samples (mode 'F', values 0.0..1.0)")):
        for read in (read_image, check_image_decodes):
            with pytest.raises(MediaReadError, match=rf'{name}: an image of 32-bit '
                               rf'{re.escape(kind)}, which map to no known range of grey; '
                               'save it with 8 or 16 bits per sample'):
                read(tmp_path / name)


def test_an_image_over_pil_s_bomb_limit_is_a_media_error_naming_it(tmp_path, monkeypatch):
    """PIL refuses an image over twice ``MAX_IMAGE_PIXELS`` with an error that is no OSError;
    under ``on_corrupt='skip'`` it must be skipped like any unreadable file, not stop the run."""
    Image.new('RGB', (20, 20)).save(tmp_path / 'huge.png')
    monkeypatch.setattr(Image, 'MAX_IMAGE_PIXELS', 100)
    with pytest.raises(MediaReadError, match=r'huge\.png: too large to decode \(.*400 pixels.*'
                                             r'raise PIL\.Image\.MAX_IMAGE_PIXELS'):
        read_image(tmp_path / 'huge.png')


def test_a_cut_video_is_refused_naming_the_cut_not_decoded_as_a_shorter_clip(videos, tmp_path):
    """decord read the first half of flipping_a_pancake.mkv (310 frames) as a clip of 150
    frames, silently; the Matroska segment's size says 436,346 bytes."""
    data = (videos / 'flipping_a_pancake.mkv').read_bytes()
    cut = tmp_path / 'half.mkv'
    cut.write_bytes(data[:218_000])
    with pytest.raises(MediaReadError, match=(
            r'half\.mkv: truncated: its Matroska segment ends at byte 436,346 but the file has '
            r'218,000 bytes')):
        read_video_frames(cut, 12, random_offset=False)
    empty = tmp_path / 'empty.mp4'
    empty.write_bytes(b'')
    with pytest.raises(MediaReadError, match=r'empty\.mp4: the file is empty \(0 bytes\)'):
        read_video_frames(empty, 12, random_offset=False)


@pytest.mark.parametrize(('kept', 'gap'), [(0.6, 421_081), (0.97, 436_273)])
def test_a_clip_zeroed_from_a_cut_on_is_refused_not_decoded_as_a_shorter_clip(
        videos, tmp_path, kept, gap):
    """flipping_a_pancake.mkv (310 frames) with its bytes zeroed from 60 % on, as a
    preallocating downloader leaves a file it never finished, read as a clip of 180 frames
    (from 97 % on, its cue index gone: 300), even by check_video_decodes; its clusters start at
    bytes 1,001, 211,602 and 421,081, its cues at 436,273."""
    data = (videos / 'flipping_a_pancake.mkv').read_bytes()
    path = tmp_path / 'unfinished.mkv'
    path.write_bytes(data[:int(len(data) * kept)] + bytes(len(data) - int(len(data) * kept)))
    for read in (check_video_container, lambda clip: read_video_frames(clip, 12, False)):
        with pytest.raises(MediaReadError, match=(
                rf'unfinished\.mkv: no Matroska element at byte {gap:,} of its segment '
                r'\(59\.\.436,346\): the bytes there are zeros or damage')):
            read(path)


def test_zeros_inside_one_cluster_are_found_by_the_decode_check(videos, tmp_path):
    """flipping_a_pancake.mkv zeroed over bytes 218,173-327,259, inside its second cluster
    (211,602-421,081), whose size stays right: decord read 166 of its 310 frames and decoded
    them all, so check_video_decodes passed it; the walk of the cluster's blocks finds the first
    block header zeroed, at byte 220,448."""
    data = (videos / 'flipping_a_pancake.mkv').read_bytes()
    path = tmp_path / 'damaged.mkv'
    path.write_bytes(data[:218_173] + bytes(109_086) + data[327_259:])
    with pytest.raises(MediaReadError, match=(
            r'damaged\.mkv: no Matroska element at byte 220,448 of its segment')):
        check_video_decodes(path)
    check_video_decodes(videos / 'flipping_a_pancake.mkv')


@pytest.mark.parametrize('read', [check_video_decodes, check_video_opens,
                                  lambda clip: read_video_frames(clip, 12, False)])
def test_a_clip_whose_header_is_damaged_is_named_so_with_its_first_bytes(videos, tmp_path,
                                                                         read):
    """bigbuckbunny.mp4 with its first 16 bytes zeroed (its 'ftyp' box) read as 'decoding
    failed (Error reading PATH...)': the file named twice, the cause not at all."""
    data = (videos / 'bigbuckbunny.mp4').read_bytes()
    path = tmp_path / 'clip.mp4'
    path.write_bytes(bytes(16) + data[16:])
    with pytest.raises(MediaReadError) as info:
        read(path)
    assert (info.value.path, info.value.reason) == (str(path), (
        'no video container FFmpeg knows: its first bytes (00 00 00 00 00 00 00 00) begin none '
        "(a damaged header, or a file of another kind under a video's name, as a web page "
        'saved for a download)'))


@pytest.mark.parametrize('width', [16, 72])
def test_a_clip_of_a_width_decord_cannot_copy_is_named_as_decord_s_limit_not_damage(tmp_path,
                                                                                     width):
    """A sound clip 16 or 72 px wide (written with OpenCV, mmengine's dependency) read as a
    damaged file: 'decoding failed (Check failed: from_size == to_size ...)'."""
    cv2 = pytest.importorskip('cv2')
    path = tmp_path / f'w{width}.mp4'
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*'mp4v'), 10, (width, 32))
    for value in range(0, 200, 50):
        writer.write(np.full((32, width, 3), value, dtype=np.uint8))
    writer.release()
    capture = cv2.VideoCapture(str(path))
    assert capture.read()[0]  # the file is sound: another FFmpeg reader decodes it
    capture.release()
    with pytest.raises(MediaReadError, match=(
            rf'w{width}\.mp4: decord 0\.6\.0 cannot decode frames of this width, though the file '
            r'may be sound \(it fails on clips 8, 16, 24, 48 or 72 px wide, dmlc/decord#336; '
            r'Check failed: .*\); re-encode it wider')):
        read_video_frames(path, 2, random_offset=False)


def encoded_image(image_format: str) -> bytes:
    """A 48 x 64 image of noise, encoded as ``image_format``."""
    pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, image_format)
    return buffer.getvalue()


@pytest.mark.parametrize('image_format', ['JPEG', 'PNG'])
def test_the_decode_check_refuses_an_image_where_a_read_does(tmp_path, image_format):
    """An image cut short passed check_image_file (it is not empty) and failed when read, at its
    batch; check_image_decodes fails on it as read_image does, naming the file, and passes the
    whole file (a JPEG decoded at an eighth of its size, which reads all of its data)."""
    data = encoded_image(image_format)
    path = tmp_path / f'image.{image_format.lower()}'
    # Cut at eighths of the file: inside its data (a PNG cut in its last chunk, IEND, reads).
    for end in (len(data), *(len(data) * eighths // 8 for eighths in range(1, 8))):
        path.write_bytes(data[:end])
        try:
            read_image(path)
            expected = None
        except MediaReadError as error:
            expected = error.reason
        try:
            check_image_decodes(path)
            found = None
        except MediaReadError as error:
            found = error.reason
            assert error.path == str(path)
        assert (end, found) == (end, expected)
        assert (expected is None) == (end == len(data))


def test_the_decode_check_decodes_every_frame_of_a_video(videos):
    """corrupted.mp4's container is whole and decord opens it; its frames 28-49 do not decode,
    which only decoding them finds."""
    with pytest.raises(MediaReadError, match=r'corrupted\.mp4: decoding failed \(') as info:
        check_video_decodes(videos / 'corrupted.mp4')
    assert info.value.path == str(videos / 'corrupted.mp4')
    for name in ('video_0.mov', 'unordered.mov', 'flipping_a_pancake.mkv'):
        check_video_decodes(videos / name)


def test_a_stream_that_ends_before_its_count_is_named_by_the_decode_check(tmp_path):
    """A failed download saved as 'video7010.txt' is opened by FFmpeg's text demuxer, which
    counts a frame it cannot give: decord's StopIteration escaped, naming no file, and stopped
    the dataset's check before its report of every damaged file."""
    path = tmp_path / 'video7010.txt'
    path.write_text('404 Not Found\n')
    with pytest.raises(MediaReadError) as info:
        check_video_decodes(path)
    assert (info.value.path, info.value.reason) == (str(path), (
        'decoding failed (its stream ends after 0 of the 1 frames its header counts)'))


def test_a_relative_name_with_a_colon_is_read_as_a_file_not_an_url(tmp_path, monkeypatch):
    """FFmpeg read 'cam1-12:30.mp4' as an URL of the protocol 'cam1-12', and the sound clip
    was refused as 'no video container FFmpeg knows' (a dataset with data_root left '')."""
    write_clip(tmp_path / 'cam1-12:30.mp4', 'mp4v', frames=3)
    monkeypatch.chdir(tmp_path)
    frames, indices = read_video_frames('cam1-12:30.mp4', 3, random_offset=False)
    assert (tuple(frames.shape), indices) == ((3, 3, 48, 64), [0, 1, 2])
    check_video_decodes('cam1-12:30.mp4')


def test_a_video_whose_name_is_no_utf8_is_read(tmp_path):
    """decord encodes a name as UTF-8: a Latin-1 system's 'café.mp4' ('caf\\udce9.mp4' to
    Python) failed as 'decoding failed (... surrogates not allowed)', blaming a sound file."""
    sound = write_clip(tmp_path / 'clip.mp4', 'mp4v', frames=3)
    latin1 = tmp_path / 'caf\udce9.mp4'
    try:
        sound.rename(latin1)
    except (OSError, UnicodeEncodeError):
        pytest.skip('this file system keeps no name that is not UTF-8')
    frames, _ = read_video_frames(latin1, 3, random_offset=False)
    assert frames.shape == (3, 3, 48, 64)
    check_video_decodes(latin1)
    assert sorted(path.name for path in tmp_path.iterdir()) == ['caf\udce9.mp4']


@pytest.mark.parametrize('check', [read_image, check_image_decodes])
def test_pillow_set_to_read_images_cut_short_is_refused_not_padded(tmp_path, monkeypatch,
                                                                     check):
    """With LOAD_TRUNCATED_IMAGES (the usual advice for Pillow's 'image file is truncated'),
    a JPEG cut in half read without an error, its lower rows all 128 (grey); a RuntimeError,
    not a MediaReadError, which on_corrupt='skip' would take as every image's fault."""
    from PIL import ImageFile

    data = encoded_image('JPEG')
    (tmp_path / 'cut.jpg').write_bytes(data[:len(data) // 2])
    (tmp_path / 'whole.jpg').write_bytes(data)
    monkeypatch.setattr(ImageFile, 'LOAD_TRUNCATED_IMAGES', True)
    for name in ('cut.jpg', 'whole.jpg'):
        with pytest.raises(RuntimeError, match=r'^PIL\.ImageFile\.LOAD_TRUNCATED_IMAGES is True '
                                               r'.*set it back to False') as info:
            check(tmp_path / name)
        assert not isinstance(info.value, MediaReadError)


@pytest.mark.parametrize('read', [read_image, check_image_file, check_image_decodes])
def test_a_git_lfs_pointer_under_an_image_s_name_is_named_so(tmp_path, read):
    """A dataset repository cloned without Git LFS leaves a pointer under each image's name:
    a read said 'not a decodable image (cannot identify image file ...)', and the size check
    before training passed it."""
    (tmp_path / 'a.jpg').write_bytes(LFS_POINTER_TEXT)
    with pytest.raises(MediaReadError) as info:
        read(tmp_path / 'a.jpg')
    assert (info.value.path, info.value.reason) == (str(tmp_path / 'a.jpg'), LFS_POINTER)
    # A small image is an image.
    Image.fromarray(np.full((4, 4, 3), 7, dtype=np.uint8)).save(tmp_path / 'b.png')
    assert (tmp_path / 'b.png').stat().st_size < 1024
    read(tmp_path / 'b.png')


def test_a_git_lfs_pointer_under_a_video_s_name_is_named_so(tmp_path):
    """decord said 'decoding failed (Error reading ...)'."""
    (tmp_path / 'clip.mp4').write_bytes(LFS_POINTER_TEXT)
    with pytest.raises(MediaReadError) as info:
        read_video_frames(tmp_path / 'clip.mp4', 12, random_offset=False)
    assert info.value.reason == LFS_POINTER


@pytest.mark.parametrize('read', [lambda path: read_video_frames(path, 4, False),
                                  check_video_decodes])
def test_a_folder_under_a_video_s_name_is_named_a_folder_not_missing(tmp_path, read):
    """A folder named like a clip (an unpacked archive) is named for what it is."""
    folder = tmp_path / 'clip.mp4'
    folder.mkdir()
    with pytest.raises(MediaReadError, match=r'clip\.mp4: is a folder, not a file'):
        read(folder)


@pytest.mark.parametrize('read', [read_image, check_image_file, check_image_decodes])
def test_an_empty_image_is_named_empty_not_undecodable(tmp_path, read):
    """An empty file (a download that wrote nothing) says so, rather than Pillow's guess."""
    (tmp_path / 'photo.jpg').write_bytes(b'')
    with pytest.raises(MediaReadError, match=r'photo\.jpg: the file is empty \(0 bytes\)'):
        read(tmp_path / 'photo.jpg')


@pytest.mark.parametrize(('values', 'extrema'), [((0, 65536), '0..65536'),
                                                 ((-1, 65535), '-1..65535')])
def test_32_bit_samples_just_outside_16_bits_are_refused_not_wrapped(tmp_path, values,
                                                                       extrema):
    """65536 would read as grey 0 (its top 8 of 16 bits wrapped) and -1 as 255: one sample past
    either end of 0..65535 is outside every range of grey."""
    Image.fromarray(np.array([values], dtype=np.int32)).save(tmp_path / 'edge.tif')
    with pytest.raises(MediaReadError, match=rf"edge\.tif: an image of 32-bit integer samples "
                       rf"\(mode 'I', values {extrema}\)"):
        read_image(tmp_path / 'edge.tif')


def test_zero_decoder_threads_lets_decord_choose(videos):
    """0 is decord's own 'choose for me', documented as allowed: not a bad count."""
    frames, indices = read_video_frames(videos / 'video_0.mov', 2, False, num_threads=0)
    assert frames.shape[0] == 2 and len(indices) == 2
