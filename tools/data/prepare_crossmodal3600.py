"""Convert Crossmodal-3600 to an xmr annotation.

Usage and input layout: ``python tools/data/prepare_crossmodal3600.py --help`` and docs/data.md.
"""
from xmr.datasets.converters.crossmodal3600 import main
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main)
