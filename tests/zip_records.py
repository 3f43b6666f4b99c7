"""Damage inside a zip archive (``torch.save``'s, TorchScript's) where only a CRC-32 sees it."""
from __future__ import annotations

import struct
import zipfile
from pathlib import Path


def damage_record(path: Path, name_part: str) -> str:
    """Flip one byte in the middle of the data of the first record whose name holds
    ``name_part``; the record's name."""
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if name_part in i.filename and i.file_size)
    data = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack('<HH', data[info.header_offset + 26:
                                                          info.header_offset + 30])
    start = info.header_offset + 30 + name_length + extra_length
    data[start + info.file_size // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return info.filename
