"""An annotation's records packed into one byte buffer, for datasets of millions of captions.

Held as Python objects, CC3M's 3M records with one translation take about 3.4 GB in every
training process, and a forked ``DataLoader`` worker copies each page of them it reads: reading a
record writes the reference counts of the objects on its page. :class:`RecordStore` pickles each
record into one numpy byte buffer with an offsets array (as MMEngine's ``BaseDataset`` serialises
its data list): two objects whatever the count (0.7 GB for CC3M), whose pages a worker reads
without writing, and each record decoded on access (a few microseconds). Figures:
``docs/data.md``, CC3M.
"""
from __future__ import annotations

import pickle
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import fields
from typing import overload

import numpy as np

from xmr.datasets.annotation import MediaRecord

__all__ = ['RecordStore']

#: ``MediaRecord``'s fields, in its constructor's order.
_FIELDS = tuple(field.name for field in fields(MediaRecord))


class RecordStore(Sequence[MediaRecord]):
    """An immutable sequence of :class:`MediaRecord` stored as pickled bytes.

    Each access returns a new record: changing it changes nothing in the store.

    Args:
        records: the records, in order.

    Attributes:
        buffer: uint8 ``[total bytes]``: every record's pickle, one after the other.
        offsets: int64 ``[N + 1]``: record ``i`` is ``buffer[offsets[i]:offsets[i + 1]]``.
    """

    def __init__(self, records: Iterable[MediaRecord]) -> None:
        # One growing buffer, not a list of pickles joined: the load's peak holds the records
        # and their bytes once. Each record's fields go as a tuple, so no pickle names the class.
        packed, ends = bytearray(), array('q', [0])
        for record in records:
            packed += pickle.dumps(tuple(getattr(record, name) for name in _FIELDS),
                                   protocol=pickle.HIGHEST_PROTOCOL)
            ends.append(len(packed))
        self.offsets = np.frombuffer(ends, dtype=np.int64)
        self.buffer = np.frombuffer(packed, dtype=np.uint8)
        # Views of a bytearray and an array are writable: a write would change a record.
        self.offsets.flags.writeable = self.buffer.flags.writeable = False

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, index: int) -> MediaRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[MediaRecord]: ...

    def __getitem__(self, index: int | slice) -> MediaRecord | list[MediaRecord]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        count = len(self)
        position = int(index) + count if index < 0 else int(index)
        if not 0 <= position < count:
            raise IndexError(f'record {index} is out of range for {count} records')
        start, end = self.offsets[position], self.offsets[position + 1]
        return MediaRecord(*pickle.loads(self.buffer[start:end]))

    def __iter__(self) -> Iterator[MediaRecord]:
        for start, end in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist()):
            yield MediaRecord(*pickle.loads(self.buffer[start:end]))
