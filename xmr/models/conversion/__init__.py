"""Converters of the authors' released checkpoints (MLA, DASD) into xmr checkpoints."""
from xmr.models.conversion.authors import (
    ConversionError,
    ConversionReport,
    convert_authors_checkpoint,
)

__all__ = ['ConversionError', 'ConversionReport', 'convert_authors_checkpoint']
