"""Helpers shared by the library and its command lines."""
from xmr.utils.cli import UserError, run_tool

__all__ = ['UserError', 'run_tool']
