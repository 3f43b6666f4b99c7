"""What a dataset does with a media file it cannot read: fail, or skip it and say so.

``on_corrupt='raise'`` (the default) stops with a :class:`MediaReadError` naming the file.
``on_corrupt='skip'`` warns with :class:`MediaSkippedWarning` (naming the file) and returns a
:class:`SkippedMedia` marker in place of the item. ``retrieval_collate`` drops markers (and
``None``) from the batch and lists their paths under ``batch['skipped_media']``; the
``CorruptMediaHook`` sums those lists and reports the count and the names after every train
epoch, validation and test run. Carrying the names inside the batch works with any number of
DataLoader workers, whose dataset copies share no state with the main process.
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

from xmr.datasets.media_io import MediaReadError

__all__ = ['CORRUPT_POLICIES', 'SkippedMedia', 'MediaSkippedWarning', 'check_policy',
           'skip_or_raise']

CORRUPT_POLICIES = ('raise', 'skip')


class MediaSkippedWarning(UserWarning):
    """A media file could not be read and its item was skipped."""


class SkippedMedia(NamedTuple):
    """Stands in for a dataset item whose media could not be read (``on_corrupt='skip'``).

    Attributes:
        index: the item's dataset index.
        media_path: the unreadable file.
        reason: why it could not be read.
    """

    index: int
    media_path: str
    reason: str


def check_policy(on_corrupt: str) -> str:
    """Return ``on_corrupt`` if it is a known policy, else raise naming the choices."""
    if on_corrupt not in CORRUPT_POLICIES:
        raise ValueError(f'on_corrupt must be one of {CORRUPT_POLICIES}, got {on_corrupt!r}')
    return on_corrupt


def skip_or_raise(error: MediaReadError, on_corrupt: str, index: int) -> SkippedMedia:
    """Apply the policy to a read failure: re-raise it, or warn and return the marker."""
    if on_corrupt == 'raise':
        raise error
    return warned(SkippedMedia(index=int(index), media_path=error.path, reason=error.reason))


def warned(marker: SkippedMedia, source: str = '') -> SkippedMedia:
    """Warn that ``marker``'s item is skipped (naming its file and why), and return it.

    Args:
        marker: the skipped item.
        source: where the failure was recorded, when not read just now (a feature cache).
    """
    warnings.warn(f'skipping item {marker.index}: {marker.media_path}: {marker.reason} '
                  f'({source}{"; " if source else ""}on_corrupt="skip")', MediaSkippedWarning,
                  stacklevel=3)
    return marker
