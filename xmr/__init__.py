"""xmr: cross-lingual cross-modal retrieval on frozen vision-language models."""
from xmr.version import __version__

__all__ = ['__version__']
