"""A gallery's media embeddings saved a part at a time while they are encoded, so that an
interrupted encoding goes on from what it saved (:func:`~xmr.apis.encode_media_in_parts`,
``MediaIndex.from_media(parts=...)``, ``tools/search.py``)."""
from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor

from xmr.engine.checkpoint import read_checkpoint
from xmr.fileio import atomic_torch_save, remove_stale_temporaries

#: What a part file records as its ``format``.
PART_FORMAT = 'xmr-media-encoding-part/1'

_PART_NAME = re.compile(r'^part-(\d+)\.pt$')

__all__ = ['PART_FORMAT', 'EncodingParts', 'SavedMedia']


class SavedMedia(NamedTuple):
    """One media's saved encoding: its ``[E]`` embedding and, for an encoding that keeps them,
    its ``[L, D]`` retrieval tokens (else ``None``)."""

    embedding: Tensor
    tokens: Tensor | None


class EncodingParts:
    """The folder of one encoding's parts: ``part-000001.pt``, ... each holding the ids and the
    ``[N, E]`` embeddings of the media encoded since the part before (and their retrieval
    tokens, for an encoding that keeps them), and what they depend on.

    Args:
        folder: where the parts are (created by the first :meth:`write`).
        encoded_by: what this encoding's embeddings depend on
            (:func:`~xmr.apis.media_encoding`); a part recorded with other values is refused,
            as its embeddings would differ from this encoding's.
    """

    def __init__(self, folder: str | os.PathLike, encoded_by: Mapping[str, Any]) -> None:
        self.folder = Path(folder)
        self.encoded_by = dict(encoded_by)
        # The number of the last part written, read from the folder once: listing it for every
        # part cost a 1M-media gallery's build minutes (quadratic in the parts).
        self._last_part: int | None = None

    def files(self) -> list[Path]:
        """The part files, in the order they were written."""
        numbers = self._part_numbers()
        # By number, not name: part-1000000.pt sorts before part-999999.pt as a string.
        return sorted(numbers, key=numbers.__getitem__)

    def parts(self) -> Iterator[tuple[list[str], Tensor, list[Tensor] | None]]:
        """Each part saved so far, in the order written, read when its turn comes (one part
        held at a time): its media ids, their ``[N, E]`` embeddings and, for an encoding that
        keeps them, their ``[L_n, D]`` retrieval tokens (else ``None``).

        Raises:
            ValueError: a file that is no part, or a part encoded otherwise (naming the value
                that differs).
            CheckpointReadError: a damaged part.
        """
        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(f'{self.folder}: is a file, not a folder of encoding parts: give '
                             'the parts another path')
        remove_stale_temporaries(self.folder)
        for path in self.files():
            part = read_checkpoint(path, 'encoding part', fix='remove it: its media are '
                                   'encoded again')
            if not isinstance(part, Mapping) or part.get('format') != PART_FORMAT:
                raise ValueError(f'{path}: is not a part of a media encoding (no format '
                                 f'{PART_FORMAT!r}): move it out of {self.folder}')
            self._check_encoded_by(path, part['encoded_by'])
            yield part['media_ids'], part['embeddings'], part.get('tokens')

    def read(self) -> dict[str, SavedMedia]:
        """The encodings saved so far, by media id (:meth:`parts`, all held at once).

        Raises:
            As :meth:`parts`.
        """
        rows: dict[str, SavedMedia] = {}
        for media_ids, embeddings, tokens in self.parts():
            rows.update(zip(media_ids, map(SavedMedia, embeddings,
                                           tokens or [None] * len(media_ids))))
        return rows

    def write(self, media_ids: Sequence[str], embeddings: Tensor,
              tokens: Sequence[Tensor] | None = None) -> Path:
        """Save the next part, atomically: ``[N, E]`` ``embeddings`` of the media ``media_ids``
        and, for an encoding that keeps them, their ``[L_n, D]`` retrieval ``tokens``.

        Returns:
            The part's file.
        """
        if self._last_part is None:
            self._last_part = max(self._part_numbers().values(), default=0)
        # A copy: torch.save writes a view's whole storage (a part cut from a gallery's rows
        # saved all of them), and .contiguous() leaves a row slice the view it is.
        path = atomic_torch_save(dict(format=PART_FORMAT, encoded_by=self.encoded_by,
                                      media_ids=list(media_ids),
                                      embeddings=embeddings.clone(
                                          memory_format=torch.contiguous_format),
                                      tokens=None if tokens is None else list(tokens)),
                                 self.folder / f'part-{self._last_part + 1:06d}.pt')
        self._last_part += 1
        return path

    def remove(self) -> None:
        """Delete the parts, and the folder once nothing else is in it."""
        for path in self.files():
            path.unlink()
        self._last_part = None
        remove_stale_temporaries(self.folder)
        if self.folder.is_dir() and not any(self.folder.iterdir()):
            self.folder.rmdir()

    def _part_numbers(self) -> dict[Path, int]:
        """Each part file's number (``part-000001.pt``: 1)."""
        if not self.folder.is_dir():
            return {}
        return {path: int(match[1]) for path in self.folder.iterdir()
                if (match := _PART_NAME.match(path.name))}

    def _check_encoded_by(self, path: Path, recorded: Mapping[str, Any]) -> None:
        differ = [key for key in self.encoded_by if recorded.get(key) != self.encoded_by[key]]
        if differ:
            key = differ[0]
            raise ValueError(f'{path}: its media were encoded with {key} {recorded.get(key)!r}, '
                             f'this encoding has {self.encoded_by[key]!r}: encode with the '
                             f'{key} that wrote it to go on, or remove {self.folder} to encode '
                             'the media anew')
