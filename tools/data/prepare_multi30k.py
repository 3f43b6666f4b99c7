"""Convert Multi30K (task 1 and the task 2 test captions) to xmr annotations.

Usage and input layout: ``python tools/data/prepare_multi30k.py --help`` and docs/data.md.
"""
from xmr.datasets.converters.multi30k import main
from xmr.utils.cli import run_tool

if __name__ == '__main__':
    run_tool(main)
