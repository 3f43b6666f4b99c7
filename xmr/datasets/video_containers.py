"""Whether a video file can be whole, told from its container's top-level structure alone.

An MP4/QuickTime file is a chain of boxes and a Matroska/WebM file an EBML header and a segment,
each starting with its size; reading those few bytes (a header per top-level box or element)
finds an empty file and a truncated one without decoding. decord cannot tell the
latter: it refuses an MP4 cut short only when its index (``moov``) was at the end, and reads a
cut Matroska file as a shorter clip, and so one zeroed from a point on (a download written
into a file of its full size and never finished), whose top-level elements are walked (one
header per cluster) for a gap. An MP4's index and a Matroska file's track list also
name the kind of each track (a few box headers more; the first 16 KiB): a file of sound tracks
alone (a download of a clip's audio stream) has no frame, which decord says only when it is
read. The other containers FFmpeg reads whole from a cut file, as a shorter clip without an
error, are checked at their end: an AVI's ``RIFF`` chunks record their sizes, a Flash video ends
with its last tag's size, an MPEG transport stream is whole packets; an MPEG program stream
records no size, and its packs are walked (one read per packet) only with ``blocks``. Other
containers are left to the decoder, which also tells a file :func:`unlike_its_name` (a web page
named ``.mp4``) from a misnamed video. No torch, no decord: the data tools may check files
before anything heavy is imported.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import BinaryIO

from xmr.datasets.media_files import EMPTY_FILE, LFS_POINTER, LFS_POINTER_HEAD, is_lfs_pointer

__all__ = ['VIDEO_SUFFIXES', 'container_problem', 'unlike_its_name']

# A first box of these types marks an ISO base media (MP4, MOV, M4V, 3GP) file.
_ISO_FIRST_BOXES = frozenset({b'ftyp', b'moov', b'mdat', b'free', b'skip', b'wide', b'pnot',
                              b'styp', b'sidx'})
# Boxes that hold frames or their index: one cut short is a cut file, whatever comes before.
_FRAME_BOXES = frozenset({b'moov', b'mdat', b'moof'})
_EBML_MAGIC = b'\x1a\x45\xdf\xa3'
_MATROSKA_SEGMENT = b'\x18\x53\x80\x67'
_PRINTABLE = frozenset(range(0x20, 0x7f))
_ISO_SUFFIXES = frozenset({'.mp4', '.m4v', '.mov', '.3gp', '.3g2'})
_MATROSKA_SUFFIXES = frozenset({'.mkv', '.webm'})
#: File suffixes that name a video: those whose containers are read here, and the other
#: containers FFmpeg (decord) reads, AVI, MPEG program and transport streams, Flash, Windows
#: Media and Ogg video.
VIDEO_SUFFIXES = tuple(sorted(_ISO_SUFFIXES | _MATROSKA_SUFFIXES | {
    '.avi', '.mpg', '.mpeg', '.ts', '.mts', '.m2ts', '.flv', '.wmv', '.asf', '.ogv'}))


def container_problem(path: str | os.PathLike, blocks: bool = False) -> str | None:
    """Why the video at ``path`` cannot be whole (or read: a Git LFS pointer stands in its
    place), or ``None`` when its container tells nothing wrong (or is none of MP4/QuickTime,
    Matroska/WebM, AVI, Flash and MPEG streams, whose structure is read here).

    Args:
        path: the file.
        blocks: walk each Matroska cluster's blocks and an MPEG program stream's packets too (a
            read per frame, about the whole file: for a check that decodes every frame anyway),
            which finds zeros inside one cluster, after which decord reads no frame, and a
            program stream cut short.

    Raises:
        OSError: if the file cannot be opened (missing, a folder, no permission).
    """
    with open(path, 'rb') as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            return EMPTY_FILE
        head = file.read(max(LFS_POINTER_HEAD, _HEAD_SIZE))
        if is_lfs_pointer(head, size):
            return LFS_POINTER
        if head[:4] == _EBML_MAGIC:
            return _matroska_problem(file, size, blocks)
        if head[4:8] in _ISO_FIRST_BOXES:
            return _iso_problem(file, size)
        if head[:4] == b'RIFF' and head[8:12] == b'AVI ':
            return _riff_problem(file, size)
        if head[:3] == b'FLV':
            return _flv_problem(file, size)
        if head[:4] == _MPEG_PACK:
            return _program_stream_problem(file, size) if blocks else None
        packets = _transport_packets(head)
        if packets is not None:
            return _transport_stream_problem(file, size, *packets)
    return None


def unlike_its_name(path: str | os.PathLike) -> bool:
    """Whether ``path``'s name says a video (a suffix of :data:`VIDEO_SUFFIXES`) but its first
    bytes begin none of their containers (:func:`_begins_a_video`): a web page or an error
    message saved under a video's name, or a video in another container misnamed, which only a
    decoder can tell apart."""
    if os.path.splitext(path)[1].lower() not in VIDEO_SUFFIXES:
        return False
    with open(path, 'rb') as file:
        head = file.read(_HEAD_SIZE)
    return not _begins_a_video(head)


_MPEG_PACK = b'\x00\x00\x01\xba'
# The first bytes of the containers of VIDEO_SUFFIXES other than MP4's, Matroska's and AVI's: a
# Flash video's, an ASF (Windows Media) header object's GUID, an Ogg page's, an MPEG program
# stream's pack header and an MPEG video sequence header.
_MAGIC = (b'FLV', b'\x30\x26\xb2\x75\x8e\x66\xcf\x11\xa6\xd9\x00\xaa\x00\x62\xce\x6c',
          b'OggS', _MPEG_PACK, b'\x00\x00\x01\xb3')
# MPEG transport stream packets open with a sync byte: (bytes before it, packet size) of a
# broadcast stream's packets and of a Blu-ray .m2ts's, whose packets carry a 4-byte time code.
_MPEG_TS_PACKETS = ((0, 188), (4, 192))
_MPEG_TS_SYNC = 0x47
#: Bytes of a file's start that tell every container of :data:`VIDEO_SUFFIXES`.
_HEAD_SIZE = 4 + 192 + 1


def _begins_a_video(head: bytes) -> bool:
    """Whether ``head``, a file's first bytes, begins a container of :data:`VIDEO_SUFFIXES`: MP4
    or QuickTime, Matroska or WebM, AVI, Flash, ASF, Ogg, an MPEG program or elementary stream,
    or an MPEG transport stream (a sync byte opening each of its first two packets)."""
    return (head[:4] == _EBML_MAGIC or head[4:8] in _ISO_FIRST_BOXES
            or (head[:4] == b'RIFF' and head[8:12] == b'AVI ') or head.startswith(_MAGIC)
            or _transport_packets(head) is not None)


def _transport_packets(head: bytes) -> tuple[int, int] | None:
    """``(bytes before each packet's sync byte, packet size)`` of the MPEG transport stream
    whose first bytes are ``head`` (a sync byte opening each of its first two packets), or
    ``None`` for no transport stream."""
    return next(((lead, size) for lead, size in _MPEG_TS_PACKETS
                 if len(head) > lead + size and head[lead] == head[lead + size] == _MPEG_TS_SYNC),
                None)


def _truncated(what: str, end: int, size: int) -> str:
    return (f'truncated: its {what} ends at byte {end:,} but the file has {size:,} bytes (a copy '
            'or download cut short)')


def _box_at(file: BinaryIO, offset: int, end: int) -> tuple[bytes, int, int] | None:
    """The box whose header starts at ``offset`` of a parent ending at ``end``: ``(type,
    header length, size)`` (``size: uint32, type: 4 chars``; size 1: a uint64 follows, size 0:
    to ``end``; ISO/IEC 14496-12, 4.2); ``None`` where zeros stand for a header (padding)."""
    file.seek(offset)
    header = file.read(16)
    if header[:8] == bytes(8):
        return None
    box_size, box_type = struct.unpack('>I4s', header[:8])
    if box_size == 1 and len(header) == 16:
        return box_type, 16, struct.unpack('>Q', header[8:])[0]
    return box_type, 8, end - offset if box_size == 0 else box_size


def _iso_problem(file: BinaryIO, size: int) -> str | None:
    """Walk the top-level boxes (:func:`_box_at`); every one must end inside the file, and one
    must be ``moov``, the index without which no frame can be found, listing a track that is
    not sound alone (:func:`_sound_alone`).

    Bytes after whole ``moov`` and ``mdat`` boxes that are no whole box (a trailer some phones
    and tools append) are left to the decoder, which reads the frames without them; a box of
    frames or their index (``moov``, ``mdat``, ``moof``) that runs past the end is a cut file."""
    offset, seen, index = 0, set(), None
    # A tail shorter than a box header is padding some writers leave, not a cut box.
    while size - offset >= 8:
        box = _box_at(file, offset, size)
        if box is None:
            break  # zeros where a box would begin: padding, read by decoders as such
        box_type, header_size, box_size = box
        is_box = box_size >= 8 and set(box_type) <= _PRINTABLE
        if ({b'moov', b'mdat'} <= seen and box_type not in _FRAME_BOXES
                and not (is_box and offset + box_size <= size)):
            break
        if not is_box:
            return (f'not an MP4/QuickTime file: no box at byte {offset:,} (size {box_size}, '
                    f'type {box_type!r})')
        if offset + box_size > size:
            return _truncated(f'{box_type.decode()!r} box', offset + box_size, size)
        if box_type == b'moov' and index is None:
            index = (offset + header_size, offset + box_size)
        seen.add(box_type)
        offset += box_size
    if index is None:
        return "no 'moov' box, the index of the frames (a recording never finished?)"
    if _sound_alone(file, *index):
        return ("no video track: its index ('moov') lists sound tracks alone (an audio-only "
                'file, as a download of the sound stream alone gives)')
    return None


def _children(file: BinaryIO, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """``(type, payload start, end)`` of each box inside ``[start, end)``, up to the first
    that is no box inside it."""
    while end - start >= 8:
        box = _box_at(file, start, end)
        if box is None or not box[1] <= box[2] <= end - start:
            return
        yield box[0], start + box[1], start + box[2]
        start += box[2]


def _sound_alone(file: BinaryIO, start: int, end: int) -> bool:
    """Whether the ``moov`` payload ``[start, end)`` lists tracks and each is sound: its
    ``trak/mdia/hdlr`` handler (after version, flags and 4 bytes: ``pre_defined`` in MP4,
    QuickTime's component type) is ``soun``. FFmpeg makes a track of another handler, or of
    none, a video stream where its sample entry names a video codec, so only ``soun`` tracks
    are surely no video."""
    handlers = []
    for kind, trak, trak_end in _children(file, start, end):
        if kind == b'trak':
            handlers.append(next((_handler(file, hdlr, hdlr_end)
                                  for inner, mdia, mdia_end in _children(file, trak, trak_end)
                                  if inner == b'mdia'
                                  for box, hdlr, hdlr_end in _children(file, mdia, mdia_end)
                                  if box == b'hdlr'), None))
    return bool(handlers) and all(handler == b'soun' for handler in handlers)


def _handler(file: BinaryIO, start: int, end: int) -> bytes | None:
    """The handler type of an ``hdlr`` payload ``[start, end)``, ``None`` if it is too short."""
    if end - start < 12:
        return None
    file.seek(start + 8)
    return file.read(4)


def _ebml_number(data: bytes, at: int, is_id: bool) -> tuple[int, int] | None:
    """The EBML variable-length number at ``data[at:]`` (RFC 8794, 4): ``(value, next
    offset)``; ``value`` -1 for a size of all ones (unknown); ``None`` if cut off or invalid."""
    if at >= len(data) or data[at] == 0:
        return None
    length = 9 - data[at].bit_length()
    if at + length > len(data):
        return None
    value = int.from_bytes(data[at:at + length], 'big')
    if is_id:
        return value, at + length
    value &= (1 << (7 * length)) - 1
    return (-1 if value == (1 << (7 * length)) - 1 else value), at + length


def _matroska_problem(file: BinaryIO, size: int, blocks: bool) -> str | None:
    """The segment that follows the EBML header must end inside the file, and its tracks must
    not all be sound (:func:`_matroska_sound_alone`). A segment of unknown size (a live
    recording's) cannot be checked for a cut; another element first, or a header or track list
    past the file's first :data:`_MATROSKA_HEAD` bytes, cannot be checked here at all: such
    files are left to the decoder."""
    file.seek(0)
    data = file.read(_MATROSKA_HEAD)
    header = _ebml_number(data, 4, is_id=False)
    segment = header and header[0] >= 0 and _ebml_number(data, header[1] + header[0], True)
    segment_size = segment and _ebml_number(data, segment[1], is_id=False)
    if not segment_size:
        return 'truncated: the file ends inside its Matroska header' if len(data) == size \
            else None
    if data[segment[1] - 4:segment[1]] != _MATROSKA_SEGMENT:
        return None
    length, start = segment_size
    if length >= 0 and start + length > size:
        return _truncated('Matroska segment', start + length, size)
    if _matroska_sound_alone(data, start):
        return ('no video track: its Matroska track list holds sound tracks alone (an '
                'audio-only file, as a download of the sound stream alone gives)')
    gap = _matroska_gap(file, start, start + length, blocks) if length >= 0 else None
    if gap is not None:
        return (f'no Matroska element at byte {gap:,} of its segment '
                f'({start:,}..{start + length:,}): the bytes there are zeros or damage, as a '
                'download written into a file of its full size and never finished leaves')
    return None


def _matroska_gap(file: BinaryIO, start: int, end: int, blocks: bool = False) -> int | None:
    """The first offset in the segment payload ``[start, end)`` where no top-level element
    begins (an invalid id, as zeros are, or an element running past ``end``), walking from one
    element's header to the next: one read per cluster; with ``blocks``, the same inside each
    cluster, one read per block. ``None`` when each element ends where the next begins, or at
    an element of unknown size (a live recording's cluster), whose end only its contents tell.

    A file whose bytes a preallocating downloader (aria2, a torrent client) or a crash left as
    zeros keeps its sizes; decord reads the frames before the zeros as a shorter clip, without
    a word, where an MP4's index would name frames that fail to decode.
    """
    while start < end:
        file.seek(start)
        header = file.read(_MATROSKA_ELEMENT_HEADER)
        ident = _ebml_number(header, 0, is_id=True)
        length = ident and _ebml_number(header, ident[1], is_id=False)
        if not length or start + length[1] + length[0] > end:
            return start
        if length[0] < 0:
            return None
        payload, start = start + length[1], start + length[1] + length[0]
        inner = (_matroska_gap(file, payload, start)
                 if blocks and ident[0] == _MATROSKA_CLUSTER else None)
        if inner is not None:
            return inner
    return None


# Matroska element ids (with their length markers, as written) and the value of a sound track's
# TrackType (RFC 9559).
_MATROSKA_TRACKS = 0x1654AE6B
_MATROSKA_CLUSTER = 0x1F43B675
_MATROSKA_TRACK_ENTRY = 0xAE
_MATROSKA_TRACK_TYPE = 0x83
_MATROSKA_AUDIO = 2
#: Bytes of a Matroska file read for its header and track list, which muxers write before the
#: first cluster of frames, in the first few KiB.
_MATROSKA_HEAD = 16384
# The longest element header: a 4-byte id and an 8-byte size (RFC 8794, 5 and 6).
_MATROSKA_ELEMENT_HEADER = 12


def _ebml_children(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """``(id, payload start, payload end)`` of each element in ``data[start:end]``, up to the
    first cut off or of unknown size."""
    while start < end:
        ident = _ebml_number(data, start, is_id=True)
        length = ident and _ebml_number(data, ident[1], is_id=False)
        if not length or length[0] < 0 or length[1] + length[0] > end:
            return
        yield ident[0], length[1], length[1] + length[0]
        start = length[1] + length[0]


def _matroska_sound_alone(data: bytes, segment: int) -> bool:
    """Whether the segment whose payload starts at ``data[segment]`` lists tracks before its
    first cluster, each of ``TrackType`` 2 (sound); a track without a type tells nothing."""
    for ident, start, end in _ebml_children(data, segment, len(data)):
        if ident == _MATROSKA_CLUSTER:
            break
        if ident == _MATROSKA_TRACKS:
            types = [next((int.from_bytes(data[value:value_end], 'big')
                           for field, value, value_end in _ebml_children(data, entry, entry_end)
                           if field == _MATROSKA_TRACK_TYPE), None)
                     for kind, entry, entry_end in _ebml_children(data, start, end)
                     if kind == _MATROSKA_TRACK_ENTRY]
            return bool(types) and all(kind == _MATROSKA_AUDIO for kind in types)
    return False


# A RIFF chunk size a writer left as its placeholder (FFmpeg's -1; 0 from others): a recording
# never finished, whose real size no header tells.
_RIFF_PLACEHOLDERS = (0, 0xFFFFFFFF)


def _riff_problem(file: BinaryIO, size: int) -> str | None:
    """Each ``RIFF`` chunk of an AVI file (``'RIFF'``, its size as a little-endian uint32, the
    bytes after this 8-byte header; then ``'AVI '`` or, in an OpenDML file over 1 GiB, further
    ``'AVIX'`` chunks) must end inside the file. Bytes after the chunks that are no ``RIFF``
    chunk, and a chunk whose size is a placeholder (:data:`_RIFF_PLACEHOLDERS`), are left to
    the decoder."""
    offset = 0
    while size - offset >= 8:
        file.seek(offset)
        header = file.read(8)
        if header[:4] != b'RIFF':
            break
        chunk = struct.unpack('<I', header[4:])[0]
        if chunk in _RIFF_PLACEHOLDERS:
            break
        if offset + 8 + chunk > size:
            return _truncated("AVI 'RIFF' chunk", offset + 8 + chunk, size)
        offset += 8 + chunk + (chunk & 1)  # a chunk of odd size is padded to an even one
    return None


# FLV tag types (Adobe FLV 10.1, E.4.1): sound, video, script data.
_FLV_TAG_TYPES = frozenset({8, 9, 18})
_FLV_TAG_HEADER = 11


def _flv_problem(file: BinaryIO, size: int) -> str | None:
    """A Flash video (its header, whose size a uint32 at byte 5 gives, then tags of an 11-byte
    header and ``DataSize`` bytes, each followed by its whole size as a uint32) must end with
    the size of a whole tag that ends where that size begins; a file of the header alone (no
    tag) is left to the decoder."""
    file.seek(5)
    header_size = struct.unpack('>I', file.read(4))[0]
    first_tag = header_size + 4  # after the header's own 'previous tag size' of 0
    if size <= first_tag:
        return None if size == first_tag else _truncated('FLV header', first_tag, size)
    file.seek(size - 4)
    last = struct.unpack('>I', file.read(4))[0]
    start = size - 4 - last
    if last >= _FLV_TAG_HEADER and start >= first_tag:
        file.seek(start)
        tag = file.read(_FLV_TAG_HEADER)
        if tag[0] & 0x1F in _FLV_TAG_TYPES and int.from_bytes(tag[1:4], 'big') == last - 11:
            return None
    return ('truncated: the file does not end with a whole FLV tag and its size (a copy or '
            'download cut short)')


def _transport_stream_problem(file: BinaryIO, size: int, lead: int, packet: int) -> str | None:
    """An MPEG transport stream of ``packet``-byte packets, each with its sync byte after
    ``lead`` bytes (:func:`_transport_packets`), must be whole packets, the last opening with
    its sync byte."""
    file.seek(max(size - packet, 0) + lead)
    if size % packet == 0 and file.read(1) == bytes([_MPEG_TS_SYNC]):
        return None
    return (f'truncated: its last {packet}-byte MPEG transport packet is not whole (the file '
            f'has {size:,} bytes; a copy or download cut short)')


# MPEG program stream start codes (ISO/IEC 13818-1, 2.5.3): the end code; a pack header; from
# the system header on, each a packet with a uint16 length after its start code.
_MPEG_END_CODE = 0xB9
_MPEG_PACK_CODE = 0xBA
_MPEG_FIRST_PACKET_CODE = 0xBB


def _program_stream_problem(file: BinaryIO, size: int) -> str | None:
    """Walk an MPEG program stream's packs from its start, one read per pack header or packet
    (an MPEG-2 pack header is 14 bytes and its stuffing, an MPEG-1 one 12): the last must end
    inside the file. The stream stops at its end code; bytes that begin no pack or packet
    (damage, padding) are left to the decoder."""
    offset = 0
    while offset < size:
        file.seek(offset)
        header = file.read(14)
        if len(header) < 4 or header[:3] != b'\x00\x00\x01':
            break
        code = header[3]
        if code == _MPEG_END_CODE:
            break
        if code == _MPEG_PACK_CODE:
            mpeg2 = len(header) > 4 and header[4] >> 6 == 1
            length = 14 + (header[13] & 7 if len(header) == 14 else 0) if mpeg2 else 12
        elif code >= _MPEG_FIRST_PACKET_CODE:
            length = 6 + (int.from_bytes(header[4:6], 'big') if len(header) >= 6 else 0)
        else:
            break
        if offset + length > size:
            return _truncated(f'MPEG {"pack header" if code == _MPEG_PACK_CODE else "packet"}'
                              f' at byte {offset:,}', offset + length, size)
        offset += length
    return None
