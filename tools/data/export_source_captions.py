"""Write the source captions of an xmr annotation one per line, in the order translations follow.

Usage: ``python tools/data/export_source_captions.py ANN OUT.txt [--overwrite]`` (docs/data.md).
A file standing at ``OUT.txt`` is kept unless ``--overwrite`` is given, which replaces a text
file (an earlier export: nothing in a file of lines tells it from a translation of one) and
never an annotation or a binary file.
"""
from xmr.datasets.converters.translations import main_export
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main_export)
