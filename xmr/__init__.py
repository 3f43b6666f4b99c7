"""xmr: cross-lingual cross-modal retrieval on frozen vision-language models."""
from xmr import datasets, engine, evaluation, models, packaged  # noqa: F401  (registration)
from xmr.version import __version__

__all__ = ['__version__']
