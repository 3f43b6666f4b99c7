"""Converters from the public raw releases to xmr's annotation format (``docs/data.md``).

One module per benchmark, each with a ``convert_<dataset>`` function (builds annotations in
memory, checks every input and names the file at fault) and a ``main`` command line used by
``tools/data/prepare_<dataset>.py``; outputs are written only after every input has passed, each
through a temporary file and a rename.
"""
from xmr.datasets.converters.errors import ConversionError

__all__ = ['ConversionError']
