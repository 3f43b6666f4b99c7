"""Decoding images (Pillow) and sampled video frames (decord) into uint8 tensors.

Every failure -- a missing file, an undecodable image, a damaged video stream -- becomes a
:class:`MediaReadError` that carries the file's path, so a dataset can fail or skip by policy and
always name the file.
"""
from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageFile, UnidentifiedImageError

from xmr.datasets.frame_sampling import check_frame_count, uniform_frame_indices
from xmr.datasets.media_files import (
    EMPTY_FILE,
    FOLDER,
    LFS_POINTER,
    LFS_POINTER_HEAD,
    LFS_POINTER_LIMIT,
    is_lfs_pointer,
)
from xmr.datasets.video_containers import container_problem
from xmr.utils.counts import is_count

__all__ = ['MediaReadError', 'check_decode_threads', 'check_image_decodes', 'check_image_file',
           'check_truncated_images_refused', 'check_video_container', 'check_video_decodes',
           'check_video_opens', 'read_image', 'read_video_frames']

# decord prefixes its C++ errors with "[hh:mm:ss] /source/file.cc:line: "; the rest is the reason.
_DECORD_LOCATION = re.compile(r'\[\d\d:\d\d:\d\d\] \S+:\d+: ')
# decord 0.6.0 refuses the frames of a sound clip 8, 16, 24, 48 or 72 px wide (dmlc/decord#336):
# it copies rows FFmpeg padded as if unpadded. Its width/height arguments get past it only by
# resampling, which moved 16-72 px clips' pixels by 3 levels on average (up to 70 at edges).
_DECORD_WIDTH_BUG = 'DECORDArrayCopyFromTo'
# decord's reason for a file FFmpeg opens but finds no video stream in (sound alone, a WAV).
_DECORD_NO_VIDEO = 'cannot find video stream'
# decord's whole reason when FFmpeg finds no container it knows in a file: 'Error reading PATH...'.
_DECORD_NO_CONTAINER = 'Error reading '


class MediaReadError(RuntimeError):
    """A media file cannot be read.

    Attributes:
        path: the file.
        reason: what went wrong.

    The message ends with ``fix``, by default the advice for a dataset's file.
    """

    def __init__(self, path: str | os.PathLike, reason: str,
                 fix: str = "replace the file, or set on_corrupt='skip' on the dataset to leave "
                            'it out') -> None:
        self.path = str(path)
        self.reason = reason
        self.fix = fix
        super().__init__(f'{self.path}: {reason}: {fix}')

    def __reduce__(self) -> tuple:
        # Pickled as built (a spawned dataloader worker's error, a multiprocessing result):
        # the default rebuilds it from its message alone.
        return type(self), (self.path, self.reason, self.fix)


def check_decode_threads(value: Any, name: str) -> int:
    """``value`` as decord's decoder thread count, or a ValueError saying what ``name`` must be.

    Raises:
        ValueError: unless ``value`` is an int ``>= 0`` (0: decord chooses). decord itself
            refuses another value only when it opens a file, as if the file were damaged.
    """
    if not is_count(value, least=0):
        raise ValueError(f'{name} must be an int >= 0 (decoder threads; 0 lets decord choose), '
                         f'got {value!r}')
    return int(value)


def check_image_file(path: str | os.PathLike) -> None:
    """Raise :class:`MediaReadError` naming ``path`` if it is no file, an empty one, or a Git
    LFS pointer (:func:`~xmr.datasets.media_files.is_lfs_pointer`), found with one ``stat`` (and
    a read of a file under 1 KiB); an image cut short is found only by decoding it
    (:func:`read_image`)."""
    try:
        info = os.stat(path)
    except OSError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise MediaReadError(path, FOLDER)
    if info is None or not stat.S_ISREG(info.st_mode):
        raise MediaReadError(path, 'file not found')
    if info.st_size == 0:
        raise MediaReadError(path, EMPTY_FILE)
    if info.st_size < LFS_POINTER_LIMIT and _is_lfs_pointer_file(path, info.st_size):
        raise MediaReadError(path, LFS_POINTER)


def _is_lfs_pointer_file(path: str | os.PathLike, size: int) -> bool:
    """Whether the file at ``path`` of ``size`` bytes is a Git LFS pointer (one read)."""
    try:
        with open(path, 'rb') as file:
            return is_lfs_pointer(file.read(LFS_POINTER_HEAD), size)
    except OSError:
        return False  # the read that follows names what is wrong


def check_truncated_images_refused() -> None:
    """Raise RuntimeError if Pillow is set to read images cut short
    (``PIL.ImageFile.LOAD_TRUNCATED_IMAGES``, the usual advice for its 'image file is
    truncated'): it then pads the missing rows with grey or black without an error, and no
    damaged image could be named or skipped under ``on_corrupt``."""
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        raise RuntimeError(
            'PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True (code imported into this process set '
            'it): Pillow would read an image cut short with its missing rows grey, without an '
            "error; set it back to False, and leave damaged images out with on_corrupt='skip' "
            'on the dataset (check_decode=True names them all before the first step)')


def read_image(path: str | os.PathLike) -> torch.Tensor:
    """Decode an image as RGB, as stored (an EXIF orientation is not applied, as open_clip's
    preprocessing and the benchmarks' loaders apply none); 16-bit grey as its top 8 bits.

    Returns:
        uint8 ``[3, H, W]``.

    Raises:
        MediaReadError: if the file is missing, empty or not a decodable image.
        RuntimeError: if Pillow is set to read images cut short
            (:func:`check_truncated_images_refused`).
    """
    check_truncated_images_refused()
    check_image_file(path)
    with _image_errors(path), Image.open(path) as image:
        if _sixteen_bit_grey(path, image):
            # Pillow's RGB conversion clips 16-bit samples at 255: every such scan or depth
            # map would read as one white picture. The top 8 bits keep the picture.
            grey = (np.asarray(image).astype(np.uint32) >> 8).astype(np.uint8)
            array = np.repeat(grey[..., None], 3, axis=2)
        else:
            if image.mode == 'P' and 'transparency' in image.info:
                # The same colours; straight to RGB, Pillow warns in every worker, naming no file.
                image = image.convert('RGBA')
            array = np.asarray(image.convert('RGB'))
    return torch.from_numpy(array.copy()).permute(2, 0, 1)


def _sixteen_bit_grey(path: str | os.PathLike, image: Image.Image) -> bool:
    """Whether ``image`` holds 16-bit grey samples: Pillow's ``I;16`` modes, or its 32-bit mode
    ``I`` with values in ``0..65535`` (how Pillow opens a 16-bit PGM, and a 16-bit PNG before
    10.3).

    Raises:
        MediaReadError: samples beyond 16 bits (mode ``I``) or floating-point (``F``), which
            no range maps to grey and Pillow's RGB conversion clips to one colour.
    """
    if image.mode.startswith('I;16'):
        return True
    if image.mode not in ('I', 'F'):
        return False
    low, high = image.getextrema()
    if image.mode == 'I' and 0 <= low and high <= 65535:
        return True
    kind = 'integer' if image.mode == 'I' else 'floating-point'
    raise MediaReadError(path, f'an image of 32-bit {kind} samples (mode {image.mode!r}, '
                         f'values {low}..{high}), which map to no known range of grey; save it '
                         'with 8 or 16 bits per sample')


def check_image_decodes(path: str | os.PathLike) -> None:
    """Raise :class:`MediaReadError` naming ``path`` where :func:`read_image` would: a file
    missing, empty, or not decodable whole (cut short). A JPEG decodes at an eighth of its
    size (Pillow's draft mode), which reads the whole entropy-coded stream, as a full read
    does, in about half the time; RuntimeError as :func:`read_image`."""
    check_truncated_images_refused()
    check_image_file(path)
    with _image_errors(path), Image.open(path) as image:
        _sixteen_bit_grey(path, image)  # refuses 32-bit samples as read_image does
        image.draft(None, (1, 1))
        image.load()


@contextlib.contextmanager
def _image_errors(path: str | os.PathLike) -> Iterator[None]:
    """Turn Pillow's failures to open or decode ``path`` into :class:`MediaReadError`."""
    try:
        yield
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise MediaReadError(path, f'not a decodable image ({err})') from err
    except Image.DecompressionBombError as err:  # an Exception, none of the above
        raise MediaReadError(path, f'too large to decode ({err}; raise '
                             'PIL.Image.MAX_IMAGE_PIXELS if the image is meant)') from err


def check_video_container(path: str | os.PathLike, blocks: bool = False) -> None:
    """Raise :class:`MediaReadError` naming ``path`` if its container says it cannot be whole
    (:func:`~xmr.datasets.video_containers.container_problem`, which walks a Matroska file's
    blocks too with ``blocks``) or it cannot be opened."""
    try:
        problem = container_problem(path, blocks)
    except OSError as err:
        problem = f'cannot be read ({err.strerror})'
    if problem is not None:
        raise MediaReadError(path, problem)


def check_video_opens(path: str | os.PathLike) -> None:
    """Open ``path`` with decord, which reads its packets but decodes no frame: a file in no
    container FFmpeg knows (a web page saved under a video's name) fails here.

    Raises:
        MediaReadError: naming the file and decord's reason.
    """
    _with_reader(path, 1, lambda reader: True)


def _with_reader(path: str | os.PathLike, num_threads: int, use: Callable[[Any], Any]) -> Any:
    """``use(reader)`` of a decord reader of ``path`` that has frames.

    Raises:
        MediaReadError: naming the file, when decord fails or finds no frame.
    """
    # decord is imported here so that image-only use never loads FFmpeg.
    import decord

    # The error is raised once the reader is gone, chained to nothing: decord's exception holds
    # the reader in its traceback, and an error kept (a caller's, a test's) would keep the
    # decoder and its threads alive, to be freed by whoever collects it. A worker forked
    # meanwhile inherits the reader without the threads and aborts when it frees it.
    reader, result, failure = None, None, 'the video has no frames'
    with _ffmpeg_name(path) as name:
        try:
            reader = decord.VideoReader(name, ctx=decord.cpu(0), num_threads=num_threads)
            if len(reader):
                result = use(reader)
        except (decord.DECORDError, RuntimeError, IndexError, ValueError) as err:
            failure = _decoding_failure(path, _DECORD_LOCATION.sub('', ' '.join(
                str(err).split())) or repr(err))
        finally:
            del reader
    if result is None:
        raise MediaReadError(path, failure)
    return result


def _decoding_failure(path: str | os.PathLike, reason: str) -> str:
    """What a decord error whose text is ``reason`` says of the file ``path``."""
    if _DECORD_WIDTH_BUG in reason:
        return ('decord 0.6.0 cannot decode frames of this width, though the file may be sound '
                f'(it fails on clips 8, 16, 24, 48 or 72 px wide, dmlc/decord#336; {reason}); '
                're-encode it wider, e.g. ffmpeg -i IN -vf scale=64:-2 OUT')
    if _DECORD_NO_VIDEO in reason:
        return ('no video stream: FFmpeg opens the file but finds no video in it (an audio-only '
                'file, as a download of the sound stream alone gives)')
    if reason.startswith(_DECORD_NO_CONTAINER):
        return _no_container(path)
    return f'decoding failed ({reason})'


@contextlib.contextmanager
def _ffmpeg_name(path: str | os.PathLike) -> Iterator[str]:
    """A name under which FFmpeg opens the file ``path`` as a file: absolute, since a relative
    ``cam1-12:30.mov`` is an URL of the protocol ``cam1-12`` to FFmpeg; and, for a name that is
    no UTF-8 (a Latin-1 system's ``café.mov``, ``'caf\\udce9.mov'`` to Python), which decord
    cannot encode, a link to it under a UTF-8 name in a temporary folder, for as long as the
    context lasts."""
    name = os.path.abspath(path)
    try:
        name.encode('utf-8')
    except UnicodeEncodeError:
        with tempfile.TemporaryDirectory(prefix='xmr-video-') as folder:
            link = os.path.join(folder, 'video' + _utf8_suffix(name))
            os.symlink(name, link)
            yield link
    else:
        yield name


def _utf8_suffix(name: str) -> str:
    """``name``'s suffix where it is UTF-8, for FFmpeg's probe, which weighs it; else none."""
    suffix = os.path.splitext(name)[1]
    try:
        suffix.encode('utf-8')
    except UnicodeEncodeError:
        return ''
    return suffix


def _no_container(path: str | os.PathLike) -> str:
    """Why FFmpeg opens ``path`` as no container, with its first bytes, for the reason in place
    of decord's 'Error reading PATH...', which named the file and no cause."""
    try:
        with open(path, 'rb') as file:
            head = file.read(8)
    except OSError as err:  # gone since decord tried it, or never there (check_video_opens)
        return f'cannot be read ({err.strerror})'
    return (f'no video container FFmpeg knows: its first bytes ({head.hex(" ")}) begin none (a '
            'damaged header, or a file of another kind under a video\'s name, as a web page '
            'saved for a download)')


def read_video_frames(path: str | os.PathLike, num_frames: int, random_offset: bool,
                      num_threads: int = 1) -> tuple[torch.Tensor, list[int]]:
    """Decode ``num_frames`` uniformly sampled frames of a video with decord.

    Args:
        path: the video file.
        num_frames: frames to sample (one per segment, :func:`uniform_frame_indices`).
        random_offset: random offset in each segment (training) or the centre (testing).
        num_threads: decoder threads (keep small inside DataLoader workers).

    Returns:
        ``(frames uint8 [T, 3, H, W], indices)``.

    Raises:
        MediaReadError: if the file is missing, empty, cut short (its container's sizes say so,
            :func:`~xmr.datasets.video_containers.container_problem`: decord would read a cut
            Matroska file as a shorter clip), has no video stream or no frames, or decoding
            fails.
        ValueError: if ``num_frames`` is not a positive int, or ``num_threads`` not an int
            ``>= 0``.
    """
    # Before decoding, whose failures blame the file: a bad count is the caller's error.
    check_frame_count(num_frames, 'num_frames')
    check_decode_threads(num_threads, 'num_threads')
    _check_video_file(path)

    def sample(reader) -> tuple[np.ndarray, list[int]]:
        indices = uniform_frame_indices(len(reader), num_frames, random_offset)
        frames = reader.get_batch(indices)
        # Under a bridge other code set (decord.bridge.set_bridge('torch')), decord returns
        # that framework's array, which has numpy() where decord's own has asnumpy().
        return (frames.asnumpy() if hasattr(frames, 'asnumpy') else frames.numpy()), indices

    frames, indices = _with_reader(path, num_threads, sample)
    return torch.from_numpy(frames).permute(0, 3, 1, 2).contiguous(), indices


def check_video_decodes(path: str | os.PathLike) -> None:
    """Raise :class:`MediaReadError` naming ``path`` where a read of any of its frames would
    fail: every frame is decoded, in order (damage inside a whole file, as in decord's
    ``corrupted.mp4``, whose frames 28-49 fail, is found only so), after a walk of a Matroska
    file's blocks (zeros inside one cluster, after which decord reads no frame, leave a
    shorter clip that decodes)."""
    _check_video_file(path, blocks=True)
    _with_reader(path, 1, _decode_every_frame)


def _check_video_file(path: str | os.PathLike, blocks: bool = False) -> None:
    """Raise :class:`MediaReadError` if ``path`` is no file or its container says it cannot be
    whole (:func:`check_video_container`, ``blocks`` as there)."""
    if Path(path).is_dir():
        raise MediaReadError(path, FOLDER)
    if not Path(path).is_file():
        raise MediaReadError(path, 'file not found')
    check_video_container(path, blocks)


def _decode_every_frame(reader: Any) -> bool:
    """Decode each of the frames ``reader`` counts, in order.

    Raises:
        RuntimeError: the stream ends before the count (decord's ``next()`` raises
            ``StopIteration`` there, which would end a caller's loop, or its report, unnamed).
    """
    for frame in range(len(reader)):
        try:
            reader.next()
        except StopIteration:
            raise RuntimeError(f'its stream ends after {frame} of the {len(reader)} frames its '
                               'header counts') from None
    return True
