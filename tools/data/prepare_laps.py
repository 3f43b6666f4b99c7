"""Convert LAPS's (VSE++'s) prepared Flickr30K or MSCOCO caption files to xmr annotations.

Usage and input layout: ``python tools/data/prepare_laps.py --help`` and docs/data.md.
"""
from xmr.datasets.converters.laps import main
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main)
