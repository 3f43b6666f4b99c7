"""Write the source captions of an xmr annotation one per line, in the order translations follow.

Usage: ``python tools/data/export_source_captions.py ANN OUT.txt`` (docs/data.md).
"""
from xmr.datasets.converters.translations import main_export
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main_export)
