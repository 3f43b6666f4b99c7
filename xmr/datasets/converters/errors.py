"""The error every converter stops with."""
from __future__ import annotations

__all__ = ['ConversionError']


class ConversionError(ValueError):
    """A raw release file is missing or malformed; the message names the file and the fault."""
